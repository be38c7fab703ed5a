#include "cli/paths.h"

#include <cstdlib>

#include "tools/test_model.h"

#ifndef GRAFT_BUNDLE_DIR
#define GRAFT_BUNDLE_DIR ".deps/llama.cpp"
#endif

namespace graft::cli {

std::string bundle_dir() {
  const char* env = std::getenv("GRAFT_BUNDLE_DIR");
  return env && *env ? env : GRAFT_BUNDLE_DIR;
}

std::string bundle_vocab(const std::string& name) {
  return bundle_dir() + "/models/ggml-vocab-" + name + ".gguf";
}

std::string bundle_template(const std::string& name) {
  return bundle_dir() + "/models/templates/" + name + ".jinja";
}

Result<std::string> ensure_demo_model() {
  const fs::path dir = cache_dir();
  const fs::path path = dir / "demo-qwen3-q8_0.gguf";
  std::error_code ec;
  if (fs::exists(path, ec)) return path.string();
  fs::create_directories(dir, ec);
  if (ec) return errorf("io_error", "cannot create {}: {}", dir.string(), ec.message());
  TestModelSpec spec;
  spec.arch = "qwen3";
  spec.name = "graft-demo (random weights)";
  spec.vocab_path = bundle_vocab("qwen2");
  spec.n_embd = 512;
  spec.n_layer = 4;
  spec.n_head = 8;
  spec.n_head_kv = 4;
  spec.head_dim = 64;
  spec.n_ff = 1536;
  spec.n_ctx = 8192;
  spec.rope_freq_base = 1000000.0f;
  spec.rms_eps = 1e-6f;
  spec.type = "q8_0";
  spec.tied_output = true;
  spec.seed = 7;
  GRAFT_TRY(std::string tmpl, read_file(bundle_template("Qwen-Qwen3-0.6B")));
  spec.chat_template = tmpl;
  GRAFT_TRY_STATUS(write_test_model(spec, path.string()));
  return path.string();
}

}  // namespace graft::cli

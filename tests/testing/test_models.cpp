#include "testing/test_models.h"

#include <ggml-cpu.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <mutex>

#include "util/files.h"

namespace graft::testing {

std::string bundle_dir() {
  return GRAFT_BUNDLE_DIR;
}
std::string bundle_vocab(const std::string& name) {
  return bundle_dir() + "/models/ggml-vocab-" + name + ".gguf";
}
std::string bundle_template(const std::string& name) {
  return bundle_dir() + "/models/templates/" + name + ".jinja";
}

std::string goldens_cpu_kind() {
  return ggml_cpu_has_avx512() ? "avx512" : "avx2";
}

std::string goldens_dir() {
  return std::string(GRAFT_GOLDENS_DIR) + "/" + goldens_cpu_kind();
}

TestModelSpec tiny_spec(const std::string& arch, const std::string& vocab, const std::string& type) {
  TestModelSpec spec;
  spec.arch = arch;
  spec.vocab_path = bundle_vocab(vocab);
  spec.n_embd = 128;
  spec.n_layer = 2;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.n_ff = 256;
  spec.n_ctx = 1024;
  spec.type = type;
  return spec;
}

TestModelSpec tiny_qwen35_spec(const std::string& vocab, const std::string& type) {
  TestModelSpec spec = tiny_spec("qwen35", vocab, type);
  spec.n_layer = 4;
  spec.tied_output = true;
  spec.ssm_head_dim = 16;
  spec.ssm_k_heads = 2;
  spec.ssm_v_heads = 4;
  return spec;
}

TestModelSpec tiny_gemma3_spec(const std::string& vocab, const std::string& type) {
  TestModelSpec spec = tiny_spec("gemma3", vocab, type);
  spec.n_layer = 3;
  spec.n_head_kv = 1;
  spec.head_dim = 64;
  spec.sliding_window = 8;
  spec.sliding_window_pattern = 3;
  spec.rope_freq_base = 1000000.0f;
  return spec;
}

TestModelSpec tiny_gemma4_spec(const std::string& vocab, const std::string& type) {
  TestModelSpec spec = tiny_spec("gemma4", vocab, type);
  spec.n_layer = 6;
  spec.n_head_kv = 1;
  spec.head_dim = 64;
  spec.head_dim_local = 32;
  spec.sliding_window = 8;
  spec.sliding_window_pattern = 3;
  spec.shared_kv_layers = 3;
  spec.n_embd_per_layer = 32;
  spec.rope_freq_base = 1000000.0f;
  spec.final_logit_softcap = 30.0f;
  return spec;
}

std::string scratch_dir() {
  static const std::string dir = [] {
    auto path = std::filesystem::path(GRAFT_TEST_SCRATCH_DIR) / std::to_string(::getpid());
    std::filesystem::create_directories(path);
    return path.string();
  }();
  return dir;
}

std::string test_models_dir() {
  std::string dir = GRAFT_TEST_MODELS_DIR;
  std::filesystem::create_directories(dir);
  return dir;
}

std::string test_model_path(const TestModelSpec& spec) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::string key = fmt::format(
      "{}-{}-{}-{}-{}-{}-{}-{}-{}-{}-{}-{}-{}-{}{}{}{}{}", spec.arch,
      std::filesystem::path(spec.vocab_path).stem().string(), spec.n_embd, spec.n_layer, spec.n_head,
      spec.n_head_kv, spec.head_dim, spec.n_ff, spec.type, spec.tied_output, spec.seed, spec.rope_scaling,
      std::hash<std::string>{}(spec.chat_template), spec.n_ctx,
      spec.arch == "qwen35"
          ? fmt::format("-{}-{}-{}-{}-{}-{}", spec.full_attention_interval, spec.ssm_conv_kernel,
                        spec.ssm_head_dim, spec.ssm_k_heads, spec.ssm_v_heads, spec.rope_dims)
          : std::string(),
      spec.arch == "gemma3"
          ? fmt::format("-{}-{}-{}-{}-{}", spec.sliding_window, spec.sliding_window_pattern,
                        spec.rope_freq_base, spec.rope_freq_base_local, spec.final_logit_softcap)
          : std::string(),
      spec.arch == "gemma4"
          ? fmt::format("-{}-{}-{}-{}-{}-{}-{}-{}-{}", spec.sliding_window, spec.sliding_window_pattern,
                        spec.rope_freq_base, spec.rope_freq_base_local, spec.final_logit_softcap,
                        spec.head_dim_local, spec.shared_kv_layers, spec.n_embd_per_layer,
                        spec.double_wide_ffn)
          : std::string(),
      spec.arch == "minicpm" ? fmt::format("-{}-{}-{}", spec.scale_emb, spec.scale_depth, spec.dim_model_base)
                             : std::string());
  std::string path = test_models_dir() + "/" + key + ".gguf";
  if (!std::filesystem::exists(path)) {
    Status status = write_test_model(spec, path);
    if (!status) {
      ADD_FAILURE() << "cannot write test model: " << status.error().message;
    }
  }
  return path;
}

}  // namespace graft::testing

#include "testing/test_models.h"

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
  std::string key =
      fmt::format("{}-{}-{}-{}-{}-{}-{}-{}-{}-{}-{}-{}-{}-{}", spec.arch,
                  std::filesystem::path(spec.vocab_path).stem().string(), spec.n_embd, spec.n_layer,
                  spec.n_head, spec.n_head_kv, spec.head_dim, spec.n_ff, spec.type, spec.tied_output,
                  spec.seed, spec.rope_scaling, std::hash<std::string>{}(spec.chat_template), spec.n_ctx);
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

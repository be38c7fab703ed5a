// Helpers for the adapter tests: a tiny base model and test adapters for it.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <gtest/gtest.h>

#include "adapters/gguf_lora.h"
#include "adapters/peft.h"
#include "testing/test_models.h"
#include "tools/test_adapter.h"
#include "util/files.h"

namespace graft::testing {

// A tiny model (2 layers, 128 wide, f16) with a small vocabulary (32k,
// SentencePiece): fast to write and to read.
inline TestModelSpec tiny_base_spec(const std::string& arch = "llama") {
  return tiny_spec(arch, "llama-spm", "f16");
}
inline std::string tiny_base(const std::string& arch = "llama") {
  return test_model_path(tiny_base_spec(arch));
}

// The base model's header, read once per process and path.
inline const BaseModel& base_info(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<BaseModel>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& entry = cache[path];
  if (!entry) {
    auto base = BaseModel::open(path);
    EXPECT_TRUE(base.ok()) << (base.ok() ? "" : base.error().message);
    entry = std::make_unique<BaseModel>(base.ok() ? std::move(base).value() : BaseModel{});
  }
  return *entry;
}

inline TestAdapterSpec tiny_adapter_spec(const std::string& base, uint64_t seed = 1, int rank = 4) {
  TestAdapterSpec spec;
  spec.base_path = base;
  spec.rank = rank;
  spec.alpha = 2.0f * float(rank);
  spec.seed = seed;
  return spec;
}

inline LoraAdapter make_adapter(const TestAdapterSpec& spec) {
  auto adapter = make_test_adapter(spec, base_info(spec.base_path));
  EXPECT_TRUE(adapter.ok()) << (adapter.ok() ? "" : adapter.error().message);
  return adapter.ok() ? std::move(adapter).value() : LoraAdapter{};
}

// A fresh folder under this process's scratch folder.
inline fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::path(scratch_dir()) / name;
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir);
  return dir;
}

inline void write_peft_or_fail(const fs::path& dir, const LoraAdapter& adapter,
                               PeftWriteOptions options = {}) {
  Status status = write_peft(dir, adapter, options);
  ASSERT_TRUE(status.ok()) << status.error().message;
}

inline void write_gguf_or_fail(const fs::path& file, const LoraAdapter& adapter,
                               GgufLoraWriteOptions options = {}) {
  Status status = write_gguf_lora(file, adapter, options);
  ASSERT_TRUE(status.ok()) << status.error().message;
}

inline void write_text(const fs::path& file, std::string_view text) {
  ASSERT_TRUE(write_file_atomic(file, text).ok());
}

// The error message of a failed result (empty when it succeeded).
template <typename R>
std::string error_of(const R& result) {
  return result.ok() ? std::string() : result.error().message;
}

}  // namespace graft::testing

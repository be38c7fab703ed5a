// Helpers for the adapter tests: a tiny base model and test adapters for it.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "adapters/gguf_lora.h"
#include "adapters/peft.h"
#include "testing/test_models.h"
#include "tools/test_adapter.h"
#include "util/files.h"

namespace graft::testing {

// A tiny llama (2 layers, 128 wide, f32): fast to write and to read.
inline std::string tiny_base(const std::string& arch = "llama") {
  return test_model_path(tiny_spec(arch));
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
  auto adapter = make_test_adapter(spec);
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

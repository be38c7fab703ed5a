// Test helper: copies a GGUF file with edits (keys set or removed, tensors
// dropped or their data changed), to make broken or modified models.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include <ggml-cpp.h>
#include <ggml.h>
#include <gguf.h>

#include "util/result.h"

namespace graft::testing {

struct GgufEdits {
  std::set<std::string> drop_keys;
  std::set<std::string> drop_tensors;
  std::function<void(gguf_context*)> set_keys;
  // Called for each F32 tensor with its values, which it may change.
  std::function<void(const std::string& name, std::vector<float>& values)> edit_f32;
};

inline Status rewrite_gguf(const std::string& from, const std::string& to, const GgufEdits& edits) {
  ggml_context* data_ctx = nullptr;
  gguf_init_params params{};
  params.no_alloc = false;
  params.ctx = &data_ctx;
  gguf_context_ptr src(gguf_init_from_file(from.c_str(), params));
  if (!src) return errorf("io_error", "cannot read {}", from);
  ggml_context_ptr data(data_ctx);
  gguf_context_ptr dst(gguf_init_empty());
  gguf_set_kv(dst.get(), src.get());
  for (const auto& key : edits.drop_keys) gguf_remove_key(dst.get(), key.c_str());
  if (edits.set_keys) edits.set_keys(dst.get());
  for (int64_t i = 0; i < gguf_get_n_tensors(src.get()); ++i) {
    const std::string name = gguf_get_tensor_name(src.get(), i);
    if (edits.drop_tensors.count(name)) continue;
    ggml_tensor* t = ggml_get_tensor(data.get(), name.c_str());
    if (edits.edit_f32 && t->type == GGML_TYPE_F32) {
      std::vector<float> values(static_cast<float*>(t->data),
                                static_cast<float*>(t->data) + ggml_nelements(t));
      edits.edit_f32(name, values);
      std::copy(values.begin(), values.end(), static_cast<float*>(t->data));
    }
    gguf_add_tensor(dst.get(), t);
  }
  if (!gguf_write_to_file(dst.get(), to.c_str(), false)) return errorf("io_error", "cannot write {}", to);
  return {};
}

}  // namespace graft::testing

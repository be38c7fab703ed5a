// GgufFile: the metadata and tensor directory of a GGUF file, read through
// ggml's gguf.h (tensor data is not loaded; see MappedFile for that).
// Getters return clear errors naming the missing or mistyped key.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <ggml.h>

#include "util/result.h"

struct gguf_context;

namespace graft {

struct GgufTensorInfo {
  std::string name;
  ggml_type type;
  int64_t ne[GGML_MAX_DIMS];
  int n_dims;
  size_t offset;  // from the start of the file
  size_t size;    // bytes
};

class GgufFile {
 public:
  // Opens and validates: header readable, every tensor's data within the file.
  static Result<GgufFile> open(const std::string& path);

  const std::string& path() const { return path_; }
  gguf_context* raw() const { return ctx_.get(); }
  size_t file_size() const { return file_size_; }

  bool has(const std::string& key) const;
  Result<std::string> get_string(const std::string& key) const;
  // Any integer type widened; errors on a missing key or a non-integer value.
  Result<int64_t> get_int(const std::string& key) const;
  Result<double> get_float(const std::string& key) const;
  Result<bool> get_bool(const std::string& key) const;
  Result<std::vector<std::string>> get_string_array(const std::string& key) const;
  Result<std::vector<int64_t>> get_int_array(const std::string& key) const;
  Result<std::vector<float>> get_float_array(const std::string& key) const;

  // Optional forms: nullopt when absent, error when present but mistyped.
  std::optional<std::string> find_string(const std::string& key) const;
  std::optional<int64_t> find_int(const std::string& key) const;
  std::optional<double> find_float(const std::string& key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  Result<const GgufTensorInfo*> tensor(const std::string& name) const;

  // Every key, for dumps and tests.
  std::vector<std::string> keys() const;

 private:
  std::string path_;
  std::shared_ptr<gguf_context> ctx_;  // freed by ggml-cpp.h's gguf_context_deleter
  size_t file_size_ = 0;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace graft

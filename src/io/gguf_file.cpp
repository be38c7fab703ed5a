#include "io/gguf_file.h"

#include <ggml-cpp.h>
#include <gguf.h>

#include <cstdio>
#include <filesystem>

namespace graft {

Result<GgufFile> GgufFile::open(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return errorf("not_found", "{}: no such file", path);
  }
  GgufFile file;
  file.path_ = path;
  file.file_size_ = std::filesystem::file_size(path, ec);
  gguf_init_params params{};
  params.no_alloc = true;
  params.ctx = nullptr;
  gguf_context_ptr owned(gguf_init_from_file(path.c_str(), params));
  gguf_context* ctx = owned.get();
  if (!ctx) {
    return errorf("invalid_file",
                  "{}: not a readable GGUF file (bad magic, unsupported version, or truncated header)", path);
  }
  file.ctx_ = std::move(owned);
  const size_t data_offset = gguf_get_data_offset(ctx);
  const int64_t n = gguf_get_n_tensors(ctx);
  file.tensors_.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    GgufTensorInfo info{};
    info.name = gguf_get_tensor_name(ctx, i);
    info.type = gguf_get_tensor_type(ctx, i);
    const int64_t* ne = gguf_get_tensor_ne(ctx, i);
    info.n_dims = 1;
    for (int d = 0; d < GGML_MAX_DIMS; ++d) {
      info.ne[d] = ne[d];
      if (ne[d] != 1) info.n_dims = d + 1;
    }
    info.offset = data_offset + gguf_get_tensor_offset(ctx, i);
    info.size = gguf_get_tensor_size(ctx, i);
    if (info.offset + info.size > file.file_size_) {
      return errorf("invalid_file", "{}: truncated: tensor '{}' needs bytes up to {} but the file has {}",
                    path, info.name, info.offset + info.size, file.file_size_);
    }
    file.tensor_index_.emplace(info.name, file.tensors_.size());
    file.tensors_.push_back(std::move(info));
  }
  return file;
}

namespace {

bool is_int_type(gguf_type t) {
  switch (t) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_INT16:
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64:
      return true;
    default:
      return false;
  }
}

int64_t read_int(const void* p, gguf_type t) {
  switch (t) {
    case GGUF_TYPE_UINT8:
      return *static_cast<const uint8_t*>(p);
    case GGUF_TYPE_INT8:
      return *static_cast<const int8_t*>(p);
    case GGUF_TYPE_UINT16:
      return *static_cast<const uint16_t*>(p);
    case GGUF_TYPE_INT16:
      return *static_cast<const int16_t*>(p);
    case GGUF_TYPE_UINT32:
      return *static_cast<const uint32_t*>(p);
    case GGUF_TYPE_INT32:
      return *static_cast<const int32_t*>(p);
    case GGUF_TYPE_UINT64:
      return static_cast<int64_t>(*static_cast<const uint64_t*>(p));
    case GGUF_TYPE_INT64:
      return *static_cast<const int64_t*>(p);
    default:
      return 0;
  }
}

size_t int_size(gguf_type t) {
  switch (t) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_INT8:
      return 1;
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_INT16:
      return 2;
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_INT32:
      return 4;
    default:
      return 8;
  }
}

}  // namespace

bool GgufFile::has(const std::string& key) const {
  return gguf_find_key(ctx_.get(), key.c_str()) >= 0;
}

Result<std::string> GgufFile::get_string(const std::string& key) const {
  int64_t id = gguf_find_key(ctx_.get(), key.c_str());
  if (id < 0) return errorf("missing_key", "{}: missing metadata key '{}'", path_, key);
  if (gguf_get_kv_type(ctx_.get(), id) != GGUF_TYPE_STRING) {
    return errorf("invalid_file", "{}: metadata key '{}' is not a string", path_, key);
  }
  return std::string(gguf_get_val_str(ctx_.get(), id));
}

Result<int64_t> GgufFile::get_int(const std::string& key) const {
  int64_t id = gguf_find_key(ctx_.get(), key.c_str());
  if (id < 0) return errorf("missing_key", "{}: missing metadata key '{}'", path_, key);
  gguf_type t = gguf_get_kv_type(ctx_.get(), id);
  if (!is_int_type(t)) return errorf("invalid_file", "{}: metadata key '{}' is not an integer", path_, key);
  return read_int(gguf_get_val_data(ctx_.get(), id), t);
}

Result<double> GgufFile::get_float(const std::string& key) const {
  int64_t id = gguf_find_key(ctx_.get(), key.c_str());
  if (id < 0) return errorf("missing_key", "{}: missing metadata key '{}'", path_, key);
  gguf_type t = gguf_get_kv_type(ctx_.get(), id);
  if (t == GGUF_TYPE_FLOAT32) return static_cast<double>(gguf_get_val_f32(ctx_.get(), id));
  if (t == GGUF_TYPE_FLOAT64) return gguf_get_val_f64(ctx_.get(), id);
  if (is_int_type(t)) return static_cast<double>(read_int(gguf_get_val_data(ctx_.get(), id), t));
  return errorf("invalid_file", "{}: metadata key '{}' is not a number", path_, key);
}

Result<bool> GgufFile::get_bool(const std::string& key) const {
  int64_t id = gguf_find_key(ctx_.get(), key.c_str());
  if (id < 0) return errorf("missing_key", "{}: missing metadata key '{}'", path_, key);
  if (gguf_get_kv_type(ctx_.get(), id) != GGUF_TYPE_BOOL) {
    return errorf("invalid_file", "{}: metadata key '{}' is not a boolean", path_, key);
  }
  return gguf_get_val_bool(ctx_.get(), id);
}

Result<std::vector<std::string>> GgufFile::get_string_array(const std::string& key) const {
  int64_t id = gguf_find_key(ctx_.get(), key.c_str());
  if (id < 0) return errorf("missing_key", "{}: missing metadata key '{}'", path_, key);
  if (gguf_get_kv_type(ctx_.get(), id) != GGUF_TYPE_ARRAY ||
      gguf_get_arr_type(ctx_.get(), id) != GGUF_TYPE_STRING) {
    return errorf("invalid_file", "{}: metadata key '{}' is not a string array", path_, key);
  }
  size_t n = gguf_get_arr_n(ctx_.get(), id);
  std::vector<std::string> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.emplace_back(gguf_get_arr_str(ctx_.get(), id, i));
  return out;
}

Result<std::vector<int64_t>> GgufFile::get_int_array(const std::string& key) const {
  int64_t id = gguf_find_key(ctx_.get(), key.c_str());
  if (id < 0) return errorf("missing_key", "{}: missing metadata key '{}'", path_, key);
  if (gguf_get_kv_type(ctx_.get(), id) != GGUF_TYPE_ARRAY ||
      !is_int_type(gguf_get_arr_type(ctx_.get(), id))) {
    return errorf("invalid_file", "{}: metadata key '{}' is not an integer array", path_, key);
  }
  gguf_type t = gguf_get_arr_type(ctx_.get(), id);
  size_t n = gguf_get_arr_n(ctx_.get(), id);
  const auto* data = static_cast<const uint8_t*>(gguf_get_arr_data(ctx_.get(), id));
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = read_int(data + i * int_size(t), t);
  return out;
}

Result<std::vector<float>> GgufFile::get_float_array(const std::string& key) const {
  int64_t id = gguf_find_key(ctx_.get(), key.c_str());
  if (id < 0) return errorf("missing_key", "{}: missing metadata key '{}'", path_, key);
  if (gguf_get_kv_type(ctx_.get(), id) != GGUF_TYPE_ARRAY ||
      gguf_get_arr_type(ctx_.get(), id) != GGUF_TYPE_FLOAT32) {
    return errorf("invalid_file", "{}: metadata key '{}' is not a float32 array", path_, key);
  }
  size_t n = gguf_get_arr_n(ctx_.get(), id);
  const auto* data = static_cast<const float*>(gguf_get_arr_data(ctx_.get(), id));
  return std::vector<float>(data, data + n);
}

std::optional<std::string> GgufFile::find_string(const std::string& key) const {
  auto r = get_string(key);
  return r ? std::optional<std::string>(std::move(r).value()) : std::nullopt;
}
std::optional<int64_t> GgufFile::find_int(const std::string& key) const {
  auto r = get_int(key);
  return r ? std::optional<int64_t>(*r) : std::nullopt;
}
std::optional<double> GgufFile::find_float(const std::string& key) const {
  auto r = get_float(key);
  return r ? std::optional<double>(*r) : std::nullopt;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<const GgufTensorInfo*> GgufFile::tensor(const std::string& name) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (!t) return errorf("missing_tensor", "{}: missing tensor '{}'", path_, name);
  return t;
}

std::vector<std::string> GgufFile::keys() const {
  std::vector<std::string> out;
  int64_t n = gguf_get_n_kv(ctx_.get());
  for (int64_t i = 0; i < n; ++i) out.emplace_back(gguf_get_key(ctx_.get(), i));
  return out;
}

}  // namespace graft

#include "io/safetensors.h"

#include "io/prefault.h"

#include <ggml.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

namespace graft {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit

// Bytes per element of a dtype name; 0 when unknown.
size_t element_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"F64", 8}, {"I64", 8}, {"U64", 8},  {"F32", 4},     {"I32", 4},
      {"U32", 4}, {"F16", 2}, {"BF16", 2}, {"I16", 2},     {"U16", 2},
      {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
  };
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

const char* dtype_name(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::f32:
      return "F32";
    case SafetensorsDtype::f16:
      return "F16";
    case SafetensorsDtype::bf16:
      return "BF16";
    default:
      return "";
  }
}

Result<SafetensorsTensor> parse_entry(const std::string& path, const std::string& name,
                                      const nlohmann::json& j, size_t data_start, size_t data_size) {
  auto bad = [&](const char* what) {
    return errorf("invalid_file", "{}: tensor '{}': {}", path, name, what);
  };
  if (!j.is_object()) return bad("entry is not an object");
  auto dtype = j.find("dtype");
  auto shape = j.find("shape");
  auto offsets = j.find("data_offsets");
  if (dtype == j.end() || !dtype->is_string()) return bad("missing or non-string 'dtype'");
  if (shape == j.end() || !shape->is_array()) return bad("missing or non-array 'shape'");
  if (offsets == j.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
    return bad("'data_offsets' must be two unsigned integers");
  }
  SafetensorsTensor t;
  t.name = name;
  t.dtype = dtype->get<std::string>();
  const size_t esize = element_size(t.dtype);
  if (esize == 0) return errorf("invalid_file", "{}: tensor '{}': unknown dtype '{}'", path, name, t.dtype);
  uint64_t numel = 1;
  for (const auto& d : *shape) {
    if (!d.is_number_unsigned()) return bad("shape entries must be non-negative integers");
    const uint64_t n = d.get<uint64_t>();
    if (n != 0 && numel > std::numeric_limits<uint64_t>::max() / 8 / n) return bad("shape is too large");
    numel *= n;
    t.shape.push_back(static_cast<int64_t>(n));
  }
  const uint64_t begin = (*offsets)[0].get<uint64_t>();
  const uint64_t end = (*offsets)[1].get<uint64_t>();
  if (begin > end || end > data_size) {
    return errorf("invalid_file", "{}: tensor '{}': bytes [{}, {}) lie outside the data section ({} bytes){}",
                  path, name, begin, end, data_size, end > data_size ? " (the file may be truncated)" : "");
  }
  if (end - begin != numel * esize) {
    return errorf("invalid_file", "{}: tensor '{}': {} bytes of data for {} elements of {}", path, name,
                  end - begin, numel, t.dtype);
  }
  t.offset = data_start + begin;
  t.size = end - begin;
  return t;
}

}  // namespace

SafetensorsDtype SafetensorsTensor::float_dtype() const {
  if (dtype == "F32") return SafetensorsDtype::f32;
  if (dtype == "F16") return SafetensorsDtype::f16;
  if (dtype == "BF16") return SafetensorsDtype::bf16;
  return SafetensorsDtype::other;
}

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return errorf("not_found", "{}: no such file", path);
  GRAFT_TRY(MappedFile map, MappedFile::open(path));
  SafetensorsFile file;
  file.path_ = path;
  file.map_ = std::make_shared<MappedFile>(std::move(map));
  const uint8_t* data = file.map_->data();
  const size_t size = file.map_->size();
  if (size < 8) return errorf("invalid_file", "{}: not a safetensors file (only {} bytes)", path, size);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  if (header_len > kMaxHeaderBytes || header_len > size - 8) {
    return errorf("invalid_file", "{}: not a safetensors file or truncated (header of {} bytes, file of {})",
                  path, header_len, size);
  }
  nlohmann::json header =
      nlohmann::json::parse(data + 8, data + 8 + header_len, nullptr, /*exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return errorf("invalid_file", "{}: the safetensors header is not a JSON object", path);
  }
  const size_t data_start = 8 + header_len;
  const size_t data_size = size - data_start;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return errorf("invalid_file", "{}: '__metadata__' is not an object", path);
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) return errorf("invalid_file", "{}: metadata '{}' is not a string", path, key);
        file.metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    GRAFT_TRY(SafetensorsTensor tensor, parse_entry(path, name, entry, data_start, data_size));
    file.index_[name] = file.tensors_.size();
    file.tensors_.push_back(std::move(tensor));
  }
  return file;
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::prefault() const {
  if (map_) prefault_readable(map_->data(), map_->size());
}

std::span<const uint8_t> SafetensorsFile::bytes(const SafetensorsTensor& tensor) const {
  return {map_->data() + tensor.offset, tensor.size};
}

Result<std::vector<float>> SafetensorsFile::read_floats(const SafetensorsTensor& tensor) const {
  const uint8_t* src = map_->data() + tensor.offset;
  const int64_t n = tensor.numel();
  if (tensor.float_dtype() == SafetensorsDtype::other) {
    return errorf("invalid_file", "{}: tensor '{}' has dtype {}; only F32, F16 and BF16 are supported", path_,
                  tensor.name, tensor.dtype);
  }
  std::vector<float> out(static_cast<size_t>(n));
  switch (tensor.float_dtype()) {
    case SafetensorsDtype::f32:
      std::memcpy(out.data(), src, tensor.size);
      break;
    case SafetensorsDtype::f16:
      ggml_fp16_to_fp32_row(reinterpret_cast<const ggml_fp16_t*>(src), out.data(), n);
      break;
    case SafetensorsDtype::bf16:
      ggml_bf16_to_fp32_row(reinterpret_cast<const ggml_bf16_t*>(src), out.data(), n);
      break;
    default:
      return errorf("invalid_file", "{}: tensor '{}' has dtype {}; only F32, F16 and BF16 are supported",
                    path_, tensor.name, tensor.dtype);
  }
  return out;
}

Status SafetensorsWriter::add(const std::string& name, std::vector<int64_t> shape,
                              std::span<const float> values, SafetensorsDtype dtype) {
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) return errorf("invalid_argument", "tensor '{}': negative dimension", name);
    numel *= d;
  }
  if (numel != static_cast<int64_t>(values.size())) {
    return errorf("invalid_argument", "tensor '{}': {} values for a shape of {} elements", name,
                  values.size(), numel);
  }
  if (name.empty() || name == "__metadata__")
    return errorf("invalid_argument", "invalid tensor name '{}'", name);
  for (const Entry& e : entries_) {
    if (e.name == name) return errorf("invalid_argument", "tensor '{}' added twice", name);
  }
  Entry entry{name, dtype_name(dtype), std::move(shape), {}};
  const auto n = static_cast<int64_t>(values.size());
  switch (dtype) {
    case SafetensorsDtype::f32:
      entry.data.resize(values.size() * 4);
      std::memcpy(entry.data.data(), values.data(), entry.data.size());
      break;
    case SafetensorsDtype::f16:
      entry.data.resize(values.size() * 2);
      ggml_fp32_to_fp16_row(values.data(), reinterpret_cast<ggml_fp16_t*>(entry.data.data()), n);
      break;
    case SafetensorsDtype::bf16:
      entry.data.resize(values.size() * 2);
      ggml_fp32_to_bf16_row(values.data(), reinterpret_cast<ggml_bf16_t*>(entry.data.data()), n);
      break;
    default:
      return errorf("invalid_argument", "tensor '{}': only F32, F16 and BF16 can be written", name);
  }
  entries_.push_back(std::move(entry));
  return {};
}

Status SafetensorsWriter::write(const std::string& path) const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const Entry& e : entries_) {
    header[e.name] = {
        {"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.data.size()}}};
    offset += e.data.size();
  }
  std::string text = header.dump();
  while ((text.size() + 8) % 8 != 0) text += ' ';  // keeps the data section 8-byte aligned
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(uint64_t(text.size()) >> (8 * i));

  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE* out = std::fopen(tmp.c_str(), "wb");
  if (!out) return errorf("io_error", "cannot create {}: {}", tmp, std::strerror(errno));
  bool ok =
      std::fwrite(length, 1, 8, out) == 8 && std::fwrite(text.data(), 1, text.size(), out) == text.size();
  for (const Entry& e : entries_) {
    ok = ok && std::fwrite(e.data.data(), 1, e.data.size(), out) == e.data.size();
  }
  ok = ok && std::fflush(out) == 0 && ::fsync(::fileno(out)) == 0;
  const int err = ok ? 0 : errno;
  ok = (std::fclose(out) == 0) && ok;
  if (!ok) {
    const int why = err ? err : errno;
    std::remove(tmp.c_str());
    return errorf("io_error", "cannot write {}: {}", tmp, std::strerror(why));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return errorf("io_error", "cannot rename {} to {}: {}", tmp, path, std::strerror(err));
  }
  return {};
}

}  // namespace graft

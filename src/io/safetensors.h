// Safetensors files (the Hugging Face tensor format): an 8-byte little-endian
// header length, a JSON header naming each tensor's dtype, shape and byte
// range, then the raw data. The reader maps the file and validates every
// entry before handing anything out; the writer writes atomically.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/mmap.h"
#include "util/result.h"

namespace graft {

// The dtypes graft reads and writes as floats. Others are listed by the
// reader (so a file can be described) but cannot be converted.
enum class SafetensorsDtype { f32, f16, bf16, other };

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // as written in the file: "F32", "F16", "BF16", "I64", ...
  std::vector<int64_t> shape;
  size_t offset = 0;  // from the start of the file
  size_t size = 0;    // bytes

  SafetensorsDtype float_dtype() const;
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Opens and validates: header length and JSON, known element sizes, every
  // byte range inside the data section and matching its shape.
  static Result<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return path_; }
  size_t file_size() const { return map_ ? map_->size() : 0; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(const std::string& name) const;
  // The optional "__metadata__" string map.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  std::span<const uint8_t> bytes(const SafetensorsTensor& tensor) const;
  // Maps every page now, in one call, before all tensors are read.
  void prefault() const;
  // The tensor's values widened to float (F32, F16 and BF16 only).
  Result<std::vector<float>> read_floats(const SafetensorsTensor& tensor) const;
  // The mapping bytes() point into, for whoever keeps them past this object.
  std::shared_ptr<const MappedFile> mapping() const { return map_; }

 private:
  std::string path_;
  std::shared_ptr<MappedFile> map_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Collects float tensors (stored as F32, F16 or BF16) and writes them as one
// safetensors file, atomically (temporary file, then rename).
class SafetensorsWriter {
 public:
  Status add(const std::string& name, std::vector<int64_t> shape, std::span<const float> values,
             SafetensorsDtype dtype = SafetensorsDtype::f32);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  Status write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace graft

// A read-only memory map of a whole file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "util/result.h"

namespace graft {

class MappedFile {
 public:
  static Result<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return static_cast<const uint8_t*>(addr_); }
  size_t size() const { return size_; }
  // Drops the pages of [offset, offset+length) from this process's resident
  // set (they stay in the page cache). Used after weights were copied elsewhere.
  void release(size_t offset, size_t length) const;

 private:
  void* addr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace graft

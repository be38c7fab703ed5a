#include "io/reserved_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace graft {

void advise_huge_pages(void* data, size_t size) {
#ifdef MADV_HUGEPAGE
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + ReservedMemory::kHugePage - 1) /
                          ReservedMemory::kHugePage * ReservedMemory::kHugePage;
  const uintptr_t end =
      (reinterpret_cast<uintptr_t>(data) + size) / ReservedMemory::kHugePage * ReservedMemory::kHugePage;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)data;
  (void)size;
#endif
}

Result<ReservedMemory> ReservedMemory::reserve(size_t bytes) {
  if (bytes > SIZE_MAX - kHugePage) {
    return errorf("out_of_memory", "cannot reserve {} MiB of memory: too large", bytes >> 20);
  }
  const size_t n = bytes + kHugePage;  // room to align the start
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return errorf("out_of_memory", "cannot reserve {} MiB of memory: {}", bytes >> 20, std::strerror(errno));
  }
  ReservedMemory m;
  m.mapped_ = p;
  m.mapped_bytes_ = n;
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  m.data_ = reinterpret_cast<uint8_t*>((start + kHugePage - 1) / kHugePage * kHugePage);
  m.size_ = bytes;
  advise_huge_pages(m.data_, bytes);
  return m;
}

ReservedMemory::ReservedMemory(ReservedMemory&& other) noexcept
    : mapped_(std::exchange(other.mapped_, nullptr)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

ReservedMemory& ReservedMemory::operator=(ReservedMemory&& other) noexcept {
  if (this != &other) {
    if (mapped_) ::munmap(mapped_, mapped_bytes_);
    mapped_ = std::exchange(other.mapped_, nullptr);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

ReservedMemory::~ReservedMemory() {
  if (mapped_) ::munmap(mapped_, mapped_bytes_);
}

void ReservedMemory::zero(size_t offset, size_t n) {
  if (offset >= size_) return;
  n = std::min(n, size_ - offset);
  uint8_t* p = data_ + offset;
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  auto* begin = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + page - 1) / page * page);
  auto* end = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(p + n) / page * page);
  if (end <= begin) {
    std::memset(p, 0, n);
    return;
  }
  std::memset(p, 0, size_t(begin - p));
  ::madvise(begin, size_t(end - begin), MADV_DONTNEED);  // private anonymous pages read back as zeros
  std::memset(end, 0, size_t(p + n - end));
}

}  // namespace graft

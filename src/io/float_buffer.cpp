#include "io/float_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace graft {

std::vector<float> prefaulted_floats(size_t n) {
  std::vector<float> v;
  v.reserve(n);
#ifdef MADV_POPULATE_WRITE
  static const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (uintptr_t(v.data()) + page - 1) & ~(page - 1);
  const uintptr_t end = uintptr_t(v.data() + n) & ~(page - 1);
  // Best effort: older kernels say EINVAL and the pages fault in as usual.
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
#endif
  v.resize(n);
  return v;
}

namespace {

// madvise(advice) over the pages of [data, data + size); best effort: older
// kernels say EINVAL and the pages fault in as usual.
void populate(const void* data, size_t size, int advice) {
  if (size == 0 || advice < 0) return;
  static const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = uintptr_t(data) & ~(page - 1);
  const uintptr_t end = uintptr_t(data) + size;
  ::madvise(reinterpret_cast<void*>(begin), end - begin, advice);
}

}  // namespace

void prefault_readable(const void* data, size_t size) {
#ifdef MADV_POPULATE_READ
  populate(data, size, MADV_POPULATE_READ);
#else
  populate(data, size, -1);
#endif
}

void prefault_writable(void* data, size_t size) {
#ifdef MADV_POPULATE_WRITE
  populate(data, size, MADV_POPULATE_WRITE);
#else
  populate(data, size, -1);
#endif
}

std::vector<float> FloatPool::take(size_t n) {
  auto it = pool_.lower_bound(n);
  if (it == pool_.end()) return prefaulted_floats(n);
  std::vector<float> v = std::move(it->second);
  pool_.erase(it);
  v.resize(n);
  return v;
}

void FloatPool::give(std::vector<float>&& v) {
  if (v.capacity() == 0) return;
  const size_t capacity = v.capacity();
  pool_.emplace(capacity, std::move(v));
}

size_t FloatPool::bytes() const {
  size_t total = 0;
  for (const auto& [capacity, v] : pool_) total += capacity * sizeof(float);
  return total;
}

}  // namespace graft

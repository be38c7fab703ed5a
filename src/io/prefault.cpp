#include "io/prefault.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace graft {

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

}  // namespace graft

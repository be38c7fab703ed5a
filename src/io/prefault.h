// Mapping pages in bulk, with one madvise call, before a large read or
// write: about half the cost of faulting them one at a time. (On VMs whose
// page faults are slow, faults are most of the time spent loading an adapter.)
#pragma once

#include <cstddef>

namespace graft {

// Maps the pages of [data, data + size) of a file mapping that is about to
// be read whole, in one call (best effort).
void prefault_readable(const void* data, size_t size);
// Maps the pages of [data, data + size) writable in one call, contents
// unchanged, before they are written (best effort).
void prefault_writable(void* data, size_t size);

}  // namespace graft

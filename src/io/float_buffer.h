// Float vectors for bulk conversions (adapter weights). Fresh pages are
// faulted in with one madvise call before they are written, which costs
// about half of faulting them one at a time; a FloatPool goes further and
// hands back vectors that were used before, whose pages need no fault at all.
// (On VMs whose page faults are slow, faults are most of the time spent
// loading an adapter.)
#pragma once

#include <cstddef>
#include <map>
#include <vector>

namespace graft {

// n zeros, their pages already mapped.
std::vector<float> prefaulted_floats(size_t n);

// Maps the pages of [data, data + size) of a file mapping that is about to
// be read whole, in one call (best effort).
void prefault_readable(const void* data, size_t size);
// Maps the pages of [data, data + size) writable in one call, contents
// unchanged, before they are written (best effort).
void prefault_writable(void* data, size_t size);

// Vectors to reuse. Not thread-safe.
class FloatPool {
 public:
  // n floats (values unspecified): the smallest pooled vector that holds n,
  // else a fresh prefaulted one.
  std::vector<float> take(size_t n);
  void give(std::vector<float>&& v);
  void clear() { pool_.clear(); }
  size_t bytes() const;

 private:
  std::multimap<size_t, std::vector<float>> pool_;  // by capacity
};

}  // namespace graft

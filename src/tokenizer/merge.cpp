#include "tokenizer/merge.h"

namespace graft {

void MergeTable::build(std::vector<Entry> entries) {
  size_t capacity = 16;
  while (capacity < entries.size() * 2) capacity <<= 1;
  slots_.assign(capacity, Entry{kEmpty, 0, 0});
  mask_ = capacity - 1;
  shift_ = 64 - __builtin_ctzll(capacity);
  count_ = 0;
  for (const Entry& e : entries) {
    for (size_t i = slot(e.key);; i = (i + 1) & mask_) {
      if (slots_[i].key == e.key) break;  // a repeated pair keeps its first (lowest) rank
      if (slots_[i].key == kEmpty) {
        slots_[i] = e;
        ++count_;
        break;
      }
    }
  }
}

}  // namespace graft

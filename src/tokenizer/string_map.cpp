#include "tokenizer/string_map.h"

#include <algorithm>

namespace graft {

void StringMap::reserve(size_t n) {
  size_t capacity = 16;
  while (capacity < n * 2) capacity <<= 1;
  if (capacity <= slots_.size()) return;
  slots_.assign(capacity, Slot{0, -1});
  mask_ = capacity - 1;
  for (size_t e = 0; e < entries_.size(); ++e) {
    const std::string_view key(arena_.data() + entries_[e].offset, entries_[e].length);
    const uint64_t h = hash(key);
    size_t i = h & mask_;
    while (slots_[i].entry >= 0) i = (i + 1) & mask_;
    slots_[i] = Slot{static_cast<uint32_t>(h >> 32), static_cast<int32_t>(e)};
  }
  entries_.reserve(n);
}

void StringMap::grow() {
  reserve(std::max<size_t>(16, entries_.size() * 2));
}

StringMap::Slot* StringMap::locate(std::string_view key, uint64_t h) {
  const auto tag = static_cast<uint32_t>(h >> 32);
  for (size_t i = h & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.entry < 0) return &s;
    if (s.tag == tag) {
      const Entry& e = entries_[s.entry];
      if (e.length == key.size() && std::memcmp(arena_.data() + e.offset, key.data(), key.size()) == 0)
        return &s;
    }
  }
}

int32_t StringMap::insert(std::string_view key, int32_t value) {
  if ((entries_.size() + 1) * 2 > slots_.size()) grow();
  const uint64_t h = hash(key);
  Slot* s = locate(key, h);
  if (s->entry >= 0) return entries_[s->entry].value;
  *s = Slot{static_cast<uint32_t>(h >> 32), static_cast<int32_t>(entries_.size())};
  entries_.push_back(Entry{static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size()), value});
  arena_.append(key);
  return value;
}

void StringMap::set(std::string_view key, int32_t value) {
  if ((entries_.size() + 1) * 2 > slots_.size()) grow();
  const uint64_t h = hash(key);
  Slot* s = locate(key, h);
  if (s->entry >= 0) {
    entries_[s->entry].value = value;
    return;
  }
  *s = Slot{static_cast<uint32_t>(h >> 32), static_cast<int32_t>(entries_.size())};
  entries_.push_back(Entry{static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size()), value});
  arena_.append(key);
}

}  // namespace graft

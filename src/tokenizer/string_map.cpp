#include "tokenizer/string_map.h"

#include <algorithm>

namespace graft {

void StringMap::reserve(size_t n) {
  size_t capacity = 16;
  while (capacity < n * 2) capacity <<= 1;
  if (capacity <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(capacity, Slot{0, 0, 0, kEmpty});
  mask_ = capacity - 1;
  for (const Slot& s : old) {
    if (s.length == kEmpty) continue;
    const uint64_t h = hash(std::string_view(arena_.data() + s.offset, s.length));
    size_t i = h & mask_;
    while (slots_[i].length != kEmpty) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

void StringMap::grow() {
  reserve(std::max<size_t>(16, count_ * 2));
}

StringMap::Slot* StringMap::locate(std::string_view key, uint64_t h) {
  const auto tag = static_cast<uint32_t>(h >> 32);
  for (size_t i = h & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.length == kEmpty) return &s;
    if (s.tag == tag && s.length == key.size() &&
        std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0) {
      return &s;
    }
  }
}

int32_t StringMap::insert(std::string_view key, int32_t value) {
  if ((count_ + 1) * 2 > slots_.size()) grow();
  const uint64_t h = hash(key);
  Slot* s = locate(key, h);
  if (s->length != kEmpty) return s->value;
  *s = Slot{static_cast<uint32_t>(h >> 32), value, static_cast<uint32_t>(arena_.size()),
            static_cast<uint32_t>(key.size())};
  arena_.append(key);
  ++count_;
  return value;
}

void StringMap::set(std::string_view key, int32_t value) {
  if ((count_ + 1) * 2 > slots_.size()) grow();
  const uint64_t h = hash(key);
  Slot* s = locate(key, h);
  if (s->length != kEmpty) {
    s->value = value;
    return;
  }
  *s = Slot{static_cast<uint32_t>(h >> 32), value, static_cast<uint32_t>(arena_.size()),
            static_cast<uint32_t>(key.size())};
  arena_.append(key);
  ++count_;
}

}  // namespace graft

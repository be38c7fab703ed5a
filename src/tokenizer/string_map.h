// StringMap: string -> int32 with open addressing over one key arena; the
// vocabulary's text lookups run on every encoded word, so they avoid the node
// hops of std::unordered_map: one probe touches one 16-byte slot, a hit one
// more read of the arena. Internal to the tokenizer layer.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace graft {

class StringMap {
 public:
  // Sets the value for `key` (replacing an earlier one).
  void set(std::string_view key, int32_t value);
  // Adds `key` with `value` unless present; returns the value it now has.
  int32_t insert(std::string_view key, int32_t value);
  // The value for `key`, or -1.
  int32_t find(std::string_view key) const { return find(key, hash(key)); }
  int32_t find(std::string_view key, uint64_t h) const {
    if (slots_.empty()) return -1;
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.length == kEmpty) return -1;
      if (s.tag == tag && s.length == key.size() &&
          std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0) {
        return s.value;
      }
    }
  }
  // Starts loading the slot `h` lands on (for batched lookups).
  void prefetch(uint64_t h) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[h & mask_]);
  }
  size_t size() const { return count_; }
  void reserve(size_t n);

  static uint64_t hash(std::string_view s) {
    // 8 bytes at a time, multiply-xorshift mixing.
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (s.size() * 0xC2B2AE3D27D4EB4Full);
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      h = (h ^ w) * 0xFF51AFD7ED558CCDull;
      h ^= h >> 32;
    }
    uint64_t tail = 0;
    if (i < s.size()) std::memcpy(&tail, s.data() + i, s.size() - i);
    h = (h ^ tail) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
    return h;
  }

 private:
  static constexpr uint32_t kEmpty = 0xFFFFFFFFu;  // as a length
  struct Slot {
    uint32_t tag;
    int32_t value;
    uint32_t offset;  // key bytes in arena_
    uint32_t length;  // kEmpty: free slot
  };
  Slot* locate(std::string_view key, uint64_t h);  // the key's slot, or the free slot where it belongs
  void grow();

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t count_ = 0;
  std::string arena_;
};

}  // namespace graft

// WordCache: within one encode call, a word seen before is not merged again;
// its tokens are copied from where the output already holds them. A small
// direct-mapped table (a newer word may evict an older one), so long texts
// gain and short ones pay almost nothing. Internal to the tokenizer layer.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "tokenizer/string_map.h"

namespace graft {

using TokenId = int32_t;

class WordCache {
 public:
  static constexpr size_t kSlots = 4096;
  static constexpr size_t kMaxWord = 128;

  // Keys are views into the text being encoded: call when that text changes.
  void invalidate() { ++generation_; }

  // Encodes `word` with encode(word, out), or replays an earlier result.
  template <typename EncodeFn>
  void encode(std::string_view word, std::vector<TokenId>& out, EncodeFn&& encode_word) {
    if (word.size() > kMaxWord) {
      encode_word(word, out);
      return;
    }
    if (slots_.empty()) slots_.assign(kSlots, Slot{});
    const uint64_t h = StringMap::hash(word);
    Slot& slot = slots_[h & (kSlots - 1)];
    if (slot.generation == generation_ && slot.hash == h && slot.length == word.size() &&
        std::memcmp(slot.key, word.data(), word.size()) == 0) {
      const size_t at = out.size();
      out.resize(at + slot.count);
      std::memcpy(out.data() + at, out.data() + slot.out_offset, slot.count * sizeof(TokenId));
      return;
    }
    const size_t before = out.size();
    encode_word(word, out);
    const size_t count = out.size() - before;
    if (before > UINT32_MAX || count > UINT16_MAX) return;
    slot = Slot{h,
                word.data(),
                static_cast<uint32_t>(word.size()),
                generation_,
                static_cast<uint32_t>(before),
                static_cast<uint16_t>(count)};
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    const char* key = nullptr;
    uint32_t length = 0;
    uint32_t generation = 0;
    uint32_t out_offset = 0;
    uint16_t count = 0;
  };
  std::vector<Slot> slots_;
  uint32_t generation_ = 1;
};

}  // namespace graft

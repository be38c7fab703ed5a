// SentencePiece-style text writes spaces as U+2581 ("▁"). When no token spans
// a "▁" that follows another character, a text can be merged one word at a
// time with the same result as merging it whole: these helpers check that
// and cut the words. Internal to the tokenizer layer.
#pragma once

#include <algorithm>
#include <string_view>

#include "tokenizer/utf8.h"

namespace graft {

inline constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581

// True when `text` has a U+2581 right after some other character.
inline bool joins_word_before_space(std::string_view text) {
  for (size_t p = text.find(kSpaceMark, 1); p != std::string_view::npos; p = text.find(kSpaceMark, p + 1)) {
    if (p < kSpaceMark.size() || text.substr(p - kSpaceMark.size(), kSpaceMark.size()) != kSpaceMark)
      return true;
  }
  return false;
}

// Calls fn(word) for each piece of `text` that starts at a U+2581 following
// another character (the first piece starts at 0). Characters are cut by lead
// byte, as the merges cut them, so the pieces join back to `text`.
template <typename Fn>
void for_each_space_word(std::string_view text, Fn&& fn) {
  size_t word_start = 0;
  bool prev_is_mark = false;
  size_t i = 0;
  while (i < text.size()) {
    const size_t len = std::min(utf8::length_from_lead(static_cast<uint8_t>(text[i])), text.size() - i);
    const bool is_mark = len == kSpaceMark.size() && text.compare(i, len, kSpaceMark) == 0;
    if (is_mark && !prev_is_mark && i > word_start) {
      fn(text.substr(word_start, i - word_start));
      word_start = i;
    }
    prev_is_mark = is_mark;
    i += len;
  }
  if (word_start < text.size()) fn(text.substr(word_start));
}

}  // namespace graft

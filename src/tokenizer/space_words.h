// SentencePiece-style text writes spaces as U+2581 ("▁"). Merging a text one
// word at a time gives the same tokens as merging it whole as long as no
// token (or merge) spans the cut, so a text may be cut before each "▁" that
// follows a character X unless some token contains "X▁". SpaceJoiners
// records those X; for_each_space_word cuts. Internal to the tokenizer layer.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "util/utf8.h"

namespace graft {

inline constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581

class SpaceJoiners {
 public:
  // Records every character X that `text` has right before a "▁" (other than "▁").
  void add_from(std::string_view text) {
    for (size_t p = text.find(kSpaceMark, 1); p != std::string_view::npos; p = text.find(kSpaceMark, p + 1)) {
      const size_t start = utf8::char_start(text, p - 1);
      const std::string_view x = text.substr(start, p - start);
      if (utf8::sequence_length(x, 0) != x.size()) {
        never_cut_ = true;  // not a character: trust no cut
        continue;
      }
      if (x != kSpaceMark && !contains(x)) chars_.emplace_back(x);
    }
  }
  bool contains(std::string_view ch) const {
    return std::find(chars_.begin(), chars_.end(), ch) != chars_.end();
  }
  bool never_cut() const { return never_cut_; }
  size_t size() const { return chars_.size(); }

 private:
  std::vector<std::string> chars_;
  bool never_cut_ = false;
};

// Calls fn(word) for each piece of `text`, cut before every "▁" whose
// preceding character is a well-formed character other than "▁" that no
// token joins to a "▁". Characters are cut as the merges cut them
// (utf8::char_length), so the pieces join back to `text`.
template <typename Fn>
void for_each_space_word(std::string_view text, const SpaceJoiners& joiners, Fn&& fn) {
  if (joiners.never_cut()) {
    if (!text.empty()) fn(text);
    return;
  }
  size_t word_start = 0;
  size_t prev_start = 0, prev_len = 0;
  size_t i = 0;
  while (i < text.size()) {
    const size_t len = utf8::char_length(text, i);
    const bool is_mark = len == kSpaceMark.size() && text.compare(i, len, kSpaceMark) == 0;
    if (is_mark && i > word_start) {
      const std::string_view prev = text.substr(prev_start, prev_len);
      if (prev != kSpaceMark && utf8::sequence_length(prev, 0) == prev.size() && !joiners.contains(prev)) {
        fn(text.substr(word_start, i - word_start));
        word_start = i;
      }
    }
    prev_start = i;
    prev_len = len;
    i += len;
  }
  if (word_start < text.size()) fn(text.substr(word_start));
}

}  // namespace graft

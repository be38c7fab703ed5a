// UTF-8, in one place for every layer: validation, repair (invalid bytes
// become U+FFFD), character boundaries, and code point encoding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace graft::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed UTF-8 sequence starting at s[i] (1..4), 0 when the
// bytes there are not a complete well-formed sequence (stray continuation,
// overlong, surrogate, beyond U+10FFFF, or cut short by the end of s).
size_t sequence_length(std::string_view s, size_t i);

// True when the bytes from s[i] to the end are a proper prefix of some
// well-formed sequence (more bytes could complete it).
bool is_incomplete_prefix(std::string_view s, size_t i);

bool is_valid(std::string_view s);

// Copy of s where every byte that does not begin a well-formed sequence is
// replaced by U+FFFD (one replacement per such byte).
std::string repair(std::string_view s);

// The length of the character at s[i] for merging: a well-formed sequence,
// or a single byte where the bytes are not one.
inline size_t char_length(std::string_view s, size_t i) {
  if (static_cast<uint8_t>(s[i]) < 0x80) return 1;
  const size_t n = sequence_length(s, i);
  return n ? n : 1;
}

void append_codepoint(std::string& out, uint32_t cp);

// Decodes the well-formed sequence at s[i] (callers check sequence_length first).
uint32_t decode_at(std::string_view s, size_t i, size_t len);

// A byte that continues a character (10xxxxxx), never one that starts one.
constexpr bool is_continuation(char byte) {
  return (static_cast<uint8_t>(byte) & 0xC0) == 0x80;
}

// Where the character holding s[pos] starts (pos itself at a character's
// start or at the end of s). Looks back at most three bytes.
size_t char_start(std::string_view s, size_t pos);

// One past the character starting at s[i]: its lead byte and the
// continuation bytes that follow (loosely: any run of them).
size_t next_char(std::string_view s, size_t i);

// The length of the longest prefix of s[0, n) that does not end inside a
// character, so that a piece cut mid-character is never passed on half.
size_t whole_prefix(std::string_view s, size_t n);

// Characters in s, counting every byte that is not a continuation byte.
size_t count_chars(std::string_view s);

}  // namespace graft::utf8

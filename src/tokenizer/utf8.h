// UTF-8 helpers for the tokenizer: validation, repair (invalid bytes become
// U+FFFD), and the byte <-> character map of byte-level BPE vocabularies.
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

// GPT-2 byte-level BPE writes every byte as a printable character: printable
// Latin-1 bytes as themselves, the others as U+0100 + n. byte_to_codepoint
// gives that character; codepoint_to_byte inverts it (-1 for any other
// character).
uint32_t byte_to_codepoint(uint8_t byte);
int codepoint_to_byte(uint32_t cp);

}  // namespace graft::utf8

#include "util/utf8.h"

namespace graft::utf8 {

namespace {

// The allowed range of the second byte for a lead byte (Unicode table 3-7);
// the lead byte is assumed to start a 2..4 byte sequence.
void second_byte_range(uint8_t lead, uint8_t& lo, uint8_t& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (lead == 0xE0) lo = 0xA0;
  if (lead == 0xED) hi = 0x9F;
  if (lead == 0xF0) lo = 0x90;
  if (lead == 0xF4) hi = 0x8F;
}

// Expected length for a lead byte, 0 when the byte cannot start a sequence.
size_t expected_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xC2) return 0;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF5) return 4;
  return 0;
}

}  // namespace

size_t sequence_length(std::string_view s, size_t i) {
  const auto lead = static_cast<uint8_t>(s[i]);
  const size_t n = expected_length(lead);
  if (n <= 1) return n;
  if (i + n > s.size()) return 0;
  uint8_t lo, hi;
  second_byte_range(lead, lo, hi);
  const auto b1 = static_cast<uint8_t>(s[i + 1]);
  if (b1 < lo || b1 > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (!is_continuation(s[i + k])) return 0;
  }
  return n;
}

bool is_incomplete_prefix(std::string_view s, size_t i) {
  const auto lead = static_cast<uint8_t>(s[i]);
  const size_t n = expected_length(lead);
  const size_t have = s.size() - i;
  if (n <= 1 || have >= n) return false;
  if (have >= 2) {
    uint8_t lo, hi;
    second_byte_range(lead, lo, hi);
    const auto b1 = static_cast<uint8_t>(s[i + 1]);
    if (b1 < lo || b1 > hi) return false;
  }
  for (size_t k = 2; k < have; ++k) {
    if (!is_continuation(s[i + k])) return false;
  }
  return true;
}

bool is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII fast path, eight bytes at a time.
    while (i + 8 <= s.size()) {
      uint64_t word;
      __builtin_memcpy(&word, s.data() + i, 8);
      if (word & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= s.size()) break;
    const size_t n = sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string repair(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 16);
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = sequence_length(s, i);
    if (n == 0) {
      out += kReplacement;
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

void append_codepoint(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t decode_at(std::string_view s, size_t i, size_t len) {
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(s[i + k])); };
  switch (len) {
    case 1:
      return b(0);
    case 2:
      return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3:
      return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

size_t char_start(std::string_view s, size_t pos) {
  const size_t limit = pos >= 3 ? pos - 3 : 0;
  size_t start = pos;
  while (start > limit && start < s.size() && is_continuation(s[start])) --start;
  return start < s.size() && is_continuation(s[start]) ? pos : start;
}

size_t next_char(std::string_view s, size_t i) {
  ++i;
  while (i < s.size() && is_continuation(s[i])) ++i;
  return i;
}

size_t whole_prefix(std::string_view s, size_t n) {
  if (n == 0) return 0;
  const size_t start = char_start(s, n - 1);
  const auto lead = static_cast<uint8_t>(s[start]);
  const size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  return n - start < length ? start : n;
}

size_t count_chars(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += is_continuation(c) ? 0 : 1;
  return n;
}

}  // namespace graft::utf8

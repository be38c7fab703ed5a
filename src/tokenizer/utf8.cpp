#include "tokenizer/utf8.h"

#include <array>

namespace graft::utf8 {

namespace {

bool is_continuation(uint8_t b) {
  return (b & 0xC0) == 0x80;
}

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
    if (!is_continuation(static_cast<uint8_t>(s[i + k]))) return 0;
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
    if (!is_continuation(static_cast<uint8_t>(s[i + k]))) return false;
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

namespace {

bool is_printable_latin1(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteMap {
  std::array<uint32_t, 256> to_cp{};
  ByteMap() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) to_cp[b] = is_printable_latin1(b) ? static_cast<uint32_t>(b) : next++;
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t byte) {
  return byte_map().to_cp[byte];
}

int codepoint_to_byte(uint32_t cp) {
  if (cp < 256) return is_printable_latin1(static_cast<int>(cp)) ? static_cast<int>(cp) : -1;
  if (cp < 256 + 68) {
    // The non-printable bytes, in order, took U+0100 onwards.
    static const auto inverse = [] {
      std::array<int, 68> inv{};
      int n = 0;
      for (int b = 0; b < 256; ++b) {
        if (!is_printable_latin1(b)) inv[n++] = b;
      }
      return inv;
    }();
    return inverse[cp - 256];
  }
  return -1;
}

}  // namespace graft::utf8

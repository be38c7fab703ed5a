#include "tokenizer/byte_level.h"

#include <array>

namespace graft::utf8 {

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

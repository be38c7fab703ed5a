// SHA-256 (FIPS 180-4), incremental or one-shot, with a lowercase hex digest.
// Used for fingerprints (adapter compatibility), not for security decisions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace graft {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view text) { update(text.data(), text.size()); }
  // Finishes the hash; the object must not be updated afterwards.
  std::array<uint8_t, 32> digest();
  std::string hex_digest();

 private:
  void compress(const uint8_t* block);
  uint32_t state_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

std::string sha256_hex(std::string_view data);

}  // namespace graft

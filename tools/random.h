// A tiny deterministic generator (SplitMix64): the same seed gives the same
// numbers on every machine and compiler, unlike <random>'s distributions.
#pragma once

#include <cstdint>

namespace graft {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  float next_float() { return float(next() >> 40) * (1.0f / float(1ull << 24)); }

 private:
  uint64_t state_;
};

}  // namespace graft

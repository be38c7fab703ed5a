// The 8-bit input blocks that graft's own int8 products read (q4_rows for
// repacked Q4_0, q8_rows for Q8_0): each row of an F32 input cut into
// blocks of 32, quantized as ggml quantizes a product's input to Q8_0
// (the block's largest magnitude to 127, rounding to nearest even, the
// scale rounded to F16), so that the products come out as ggml's to the
// bit. q4_rows_quantize (model/q4_rows.h) makes them, once per input for
// every product of either kind that reads it. Internal to model/.
#pragma once

#include <cstdint>

namespace graft {

// The kernels' instruction set: AVX-512 (F, BW) with VNNI, F16C and FMA,
// selected per function so the rest of graft builds for any x86-64.
#define GRAFT_VNNI512 __attribute__((target("avx512f,avx512bw,avx512vnni,f16c,fma")))

inline constexpr int kInputBlock = 32;  // inputs per block

// One row's 32 inputs, quantized.
struct InputBlock {
  int8_t q[kInputBlock];
  // For q4_rows: -8 times the sum of q[k] over each of two sets of 16 k
  // (see q4_rows.cpp), so that its lanes multiplying unsigned nibbles
  // (weight + 8) start from the offset's share.
  int32_t bias[2];
  float d;  // the scale, rounded to F16 as ggml keeps it
  int32_t pad;
};
static_assert(sizeof(InputBlock) == 48);

}  // namespace graft

// The 8-bit input blocks that graft's own int8 products read (q4_rows for
// repacked Q4_0, q8_rows for Q8_0): each row of an F32 input cut into
// blocks of 32, quantized as ggml quantizes a product's input to Q8_0
// (the block's largest magnitude to 127, rounding to nearest even, the
// scale rounded to F16), so that the products come out as ggml's to the
// bit. q4_rows_quantize (model/q4_rows.h) makes them, once per input for
// every product of either kind that reads it. Below them, the blocks of 256
// that the K-quant products read (q4k_rows, q6k_rows) and what those share.
// Internal to model/.
#pragma once

#include <algorithm>
#include <cstdint>

#include <immintrin.h>

#include <ggml.h>

namespace graft {

// The kernels' instruction set: AVX-512 (F, BW) with VNNI, F16C and FMA,
// selected per function so the rest of graft builds for any x86-64.
#define GRAFT_VNNI512 __attribute__((target("avx512f,avx512bw,avx512vnni,f16c,fma")))
// The same with 128- and 256-bit forms of the AVX-512 instructions (VL).
#define GRAFT_VNNI512_VL __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))

// The weight kernels ask for the bytes they will read kWeightPrefetch
// bytes ahead of where they read: on the Zen 5 VM graft is measured on, the
// hardware's own prefetch left the 8- and 16-row Q4_0 products waiting on
// memory for a third of their time (graft bench, Q4_0 1B: 8 rows 171 ->
// 240 tok/s, 16 rows 191 -> 247 with 16 blocks of 144 bytes ahead; 32 and
// 64 blocks no better).
inline constexpr int kWeightPrefetch = 2304;
inline void prefetch_ahead(const void* at, size_t bytes) {
  const char* p = static_cast<const char*>(at) + kWeightPrefetch;
  for (size_t line = 0; line < bytes; line += 64) _mm_prefetch(p + line, _MM_HINT_T0);
}
template <typename Block>
inline void prefetch_ahead(const Block* at) {
  prefetch_ahead(at, sizeof(Block));
}

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

inline constexpr int kKInputBlock = 256;  // inputs per K-quant input block

// One row's 256 inputs, quantized as ggml quantizes them for Q4_K, Q5_K and
// Q6_K (q4k_rows_quantize, q5k_rows_quantize in model/q4k_rows.h): q = the
// input times -127 / (the input of largest magnitude), rounded to nearest
// even; d = 1 over that factor (negative when the largest input is).
struct KInputBlock {
  int8_t q[kKInputBlock];
  // For each 64 inputs p, the sums of q over its two halves of 32, as the
  // low and the high 16 bits (for Q4_K's and Q5_K's mins).
  int32_t sums[4];
  // The sums of q over each 16 inputs, as ggml's Q8_K blocks keep them (for
  // Q6_K's offset of -32).
  int16_t bsums[16];
  float d;
  int32_t pad[3];
};
static_assert(sizeof(KInputBlock) == 320);

// K-quant products take the rows kKMaxRows per pass over the weights, and
// many rows in chunks whose quantized inputs (about kKChunkBytes) stay in L2
// while every group of weight rows passes over them: the rows per chunk, a
// multiple of kKMaxRows, for inputs of nb blocks.
inline constexpr int kKMaxRows = 8;
inline int64_t k_rows_per_chunk(int64_t nb) {
  constexpr int64_t kKChunkBytes = 384 * 1024;
  constexpr int64_t kMaxChunkRows = 128;
  return std::clamp<int64_t>(kKChunkBytes / (nb * int64_t(sizeof(KInputBlock))) / kKMaxRows * kKMaxRows,
                             kKMaxRows, kMaxChunkRows);
}

// w [n_in, n_out] times the K-quant input blocks xq of [n_in, n_rows] as one
// node that runs `kernel`: F32 [n_out, n_rows] (model/q4k_rows.cpp).
ggml_tensor* k_rows_product(ggml_context* ctx, ggml_tensor* w, ggml_tensor* xq, ggml_custom_op_t kernel);

// A K-quant product a weight row (column) at a time: each thread a share of
// the columns, the rows in chunks of k_rows_per_chunk and passes of up to
// kKMaxRows, column[n - 1] taking n rows of one column. dst = w x as
// k_rows_product makes it (dst->src: w of Block rows as files store them, the
// quantized input).
template <typename Block>
using KColumnFn = void (*)(const Block* w, int64_t nb, const KInputBlock* in, float* dst, int64_t dst_stride);
template <typename Block>
void k_rows_by_column(ggml_tensor* dst, int ith, int nth, const KColumnFn<Block> (&column)[kKMaxRows]) {
  const ggml_tensor* w = dst->src[0];
  const auto* in = static_cast<const KInputBlock*>(dst->src[1]->data);
  const int64_t nb = w->ne[0] / kKInputBlock;
  const int64_t n_out = w->ne[1];
  const int64_t n_rows = dst->ne[1];
  const int64_t dst_stride = dst->nb[1] / sizeof(float);
  const auto* weights = static_cast<const Block*>(w->data);
  auto* out = static_cast<float*>(dst->data);
  const int64_t o0 = n_out * ith / nth;
  const int64_t o1 = n_out * (ith + 1) / nth;
  const int64_t chunk = k_rows_per_chunk(nb);
  for (int64_t c0 = 0; c0 < n_rows; c0 += chunk) {
    const int64_t c1 = std::min(n_rows, c0 + chunk);
    for (int64_t o = o0; o < o1; ++o) {
      for (int64_t r0 = c0; r0 < c1; r0 += kKMaxRows) {
        column[std::min<int64_t>(kKMaxRows, c1 - r0) - 1](weights + o * nb, nb, in + r0 * nb,
                                                          out + r0 * dst_stride + o, dst_stride);
      }
    }
  }
}

// The 8 lanes of ggml's one-row K-quant dot products (AVX2) added as ggml
// adds them at the end: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).
inline float sum_lanes8(const float* l) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

}  // namespace graft

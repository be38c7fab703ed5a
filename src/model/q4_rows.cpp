#include "model/q4_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <ggml-cpu.h>

#include "model/cpu_repack.h"
#include "model/rows_input.h"

namespace graft {

namespace {

constexpr int kBlock = kInputBlock;  // Q4_0 and the 8-bit input blocks (model/rows_input.h)
constexpr int kMaxRows =
    16;  // rows per pass over the weights (their accumulators, one per pair, stay in registers)
// Many rows (prompts, training): the inputs in chunks that stay in L2 while
// every column group passes over them, instead of all of them streamed
// again from memory for each group. Each chunk's sums are added to the
// previous ones in block order, so the result is the same to the bit.
constexpr int64_t kChunkBlocks = 128;  // blocks of the inputs per pass
constexpr int64_t kRowChunk = 64;      // rows per pass: with kChunkBlocks, 384 KB of inputs

// The inputs (InputBlock, model/rows_input.h): the kernel multiplies
// unsigned weight nibbles q (the true weight is q - 8) in lanes that each see
// one of two sets of 16 of the 32 inputs (see Q4x8), so each lane starts
// from -8 times the sum of its set's inputs (InputBlock::bias).

// Q4x8 (cpu_repack.h), read as 16 dwords per half: the bytes of each half
// give lane 2c + s column c's weights 8h + 4s .. +3 (low nibbles) and
// 16 + 8h + 4s .. +3 (high nibbles); set s is thus inputs {0-3, 8-11, 16-19,
// 24-27} + 4s. (Weight rows are output columns here.)

bool cpu_has_vnni512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("f16c") &&
                          __builtin_cpu_supports("fma");
  return has;
}

// Blocks [i0, i1) of the rows of x quantized into out[b * n_rows + r].
GRAFT_VNNI512 void quantize_blocks(const ggml_tensor* x, InputBlock* out, int64_t i0, int64_t i1) {
  const int64_t n_rows = x->ne[1];
  constexpr __mmask16 kSet0 = 0x0F0F;  // lanes k = 0-3 and 8-11 of each 16
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t b = i / n_rows;
    const int64_t r = i % n_rows;
    const float* src =
        reinterpret_cast<const float*>(static_cast<const char*>(x->data) + r * x->nb[1]) + b * kBlock;
    const __m512 v0 = _mm512_loadu_ps(src);
    const __m512 v1 = _mm512_loadu_ps(src + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const __m512 scale = _mm512_set1_ps(id);
    // Round to nearest even, as the default rounding mode does.
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, scale));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, scale));
    InputBlock& o = out[i];
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o.q), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o.q + 16), _mm512_cvtsepi32_epi8(q1));
    const __m512i q01 = _mm512_add_epi32(q0, q1);
    const int32_t sum = _mm512_reduce_add_epi32(q01);
    const int32_t sum0 = _mm512_mask_reduce_add_epi32(kSet0, q01);
    o.bias[0] = -8 * sum0;
    o.bias[1] = -8 * (sum - sum0);
    o.d = _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
    o.pad = 0;
  }
}

// Rows of x quantized into dst[b * n_rows + r], each thread a share of the blocks.
void quantize_kernel(ggml_tensor* dst, int ith, int nth, void*) {
  const ggml_tensor* x = dst->src[0];
  const int64_t total = x->ne[0] / kBlock * x->ne[1];
  quantize_blocks(x, static_cast<InputBlock*>(dst->data), total * ith / nth, total * (ith + 1) / nth);
}

// One row's integer sums over a block of 8 columns (lo0 .. hi1, unpacked):
// lane 2c + s the sum over set s of column c's weights.
GRAFT_VNNI512 inline __m512i block_sums(const InputBlock& x, __m512i lo0, __m512i lo1, __m512i hi0,
                                        __m512i hi1) {
  int64_t q[4];
  int64_t bias;
  std::memcpy(q, x.q, sizeof(q));
  std::memcpy(&bias, x.bias, sizeof(bias));
  __m512i s = _mm512_set1_epi64(bias);
  s = _mm512_dpbusd_epi32(s, lo0, _mm512_set1_epi64(q[0]));
  s = _mm512_dpbusd_epi32(s, lo1, _mm512_set1_epi64(q[1]));
  s = _mm512_dpbusd_epi32(s, hi0, _mm512_set1_epi64(q[2]));
  return _mm512_dpbusd_epi32(s, hi1, _mm512_set1_epi64(q[3]));
}

// Columns [8g, 8g + 8) of rows r0 .. r0 + R - 1, over nb blocks (added to
// dst's values with add). Rows go in pairs: lane 2c of a pair's accumulator
// holds column c of its first row, lane 2c + 1 that of its second, so the
// convert, scale and add that follow each block's integer sums serve two
// rows at once (an odd last row fills both lanes itself).
template <int R>
GRAFT_VNNI512 inline void column_group(const Q4x8* w, int64_t nb, const InputBlock* in, int64_t n_rows,
                                       int64_t r0, float* dst, int64_t dst_stride, bool add) {
  constexpr int kPairs = (R + 1) / 2;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x88));
  const __m512i pair = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  // Lane 2c takes a's lane 2c (even) or 2c + 1 (odd), lane 2c + 1 b's.
  const __m512i take_even = _mm512_set_epi32(30, 14, 28, 12, 26, 10, 24, 8, 22, 6, 20, 4, 18, 2, 16, 0);
  const __m512i take_odd = _mm512_set_epi32(31, 15, 29, 13, 27, 11, 25, 9, 23, 7, 21, 5, 19, 3, 17, 1);
  // Two rows' 8 columns, interleaved.
  const __m512i interleave = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  __m512 acc[kPairs];
  for (int p = 0; p < kPairs; ++p) {
    const int64_t ra = r0 + 2 * p;
    const int64_t rb = 2 * p + 1 < R ? ra + 1 : ra;
    acc[p] = add ? _mm512_permutex2var_ps(_mm512_castps256_ps512(_mm256_loadu_ps(dst + ra * dst_stride)),
                                          interleave,
                                          _mm512_castps256_ps512(_mm256_loadu_ps(dst + rb * dst_stride)))
                 : _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const Q4x8& blk = w[b];
    prefetch_ahead(w + b);
    const __m512i h0 = _mm512_xor_si512(_mm512_loadu_si512(blk.qs), flip);
    const __m512i h1 = _mm512_xor_si512(_mm512_loadu_si512(blk.qs + 64), flip);
    const __m512i lo0 = _mm512_and_si512(h0, low4);
    const __m512i lo1 = _mm512_and_si512(h1, low4);
    const __m512i hi0 = _mm512_and_si512(_mm512_srli_epi16(h0, 4), low4);
    const __m512i hi1 = _mm512_and_si512(_mm512_srli_epi16(h1, 4), low4);
    const __m512 dw = _mm512_permutexvar_ps(
        pair,
        _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.d)))));
    const InputBlock* a = in + b * n_rows + r0;
    for (int p = 0; p < kPairs; ++p) {
      const InputBlock& xa = a[2 * p];
      const __m512i sa = block_sums(xa, lo0, lo1, hi0, hi1);
      // Each row's whole block sum per column, which is then scaled and
      // added as ggml does (one fused multiply-add per block, in block
      // order), so the result is ggml's to the bit.
      if (2 * p + 1 == R) {  // an odd last row alone: its sums in both lanes
        const __m512i s = _mm512_add_epi32(sa, _mm512_shuffle_epi32(sa, _MM_PERM_CDAB));
        acc[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(xa.d)), acc[p]);
        continue;
      }
      const InputBlock& xb = a[2 * p + 1];
      const __m512i sb = block_sums(xb, lo0, lo1, hi0, hi1);
      const __m512i s = _mm512_add_epi32(_mm512_permutex2var_epi32(sa, take_even, sb),
                                         _mm512_permutex2var_epi32(sa, take_odd, sb));
      const __m512 dx = _mm512_mask_blend_ps(0xAAAA, _mm512_set1_ps(xa.d), _mm512_set1_ps(xb.d));
      acc[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, dx), acc[p]);
    }
  }
  const __m512i even = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 15, 13, 11, 9, 7, 5, 3, 1);
  for (int p = 0; p < kPairs; ++p) {
    const int64_t ra = r0 + 2 * p;
    _mm256_storeu_ps(dst + ra * dst_stride, _mm512_castps512_ps256(_mm512_permutexvar_ps(even, acc[p])));
    if (2 * p + 1 < R) {
      _mm256_storeu_ps(dst + (ra + 1) * dst_stride,
                       _mm512_castps512_ps256(_mm512_permutexvar_ps(odd, acc[p])));
    }
  }
}

// column_group<R> for R = 1 .. kMaxRows, at index R - 1.
using ColumnGroupFn = void (*)(const Q4x8*, int64_t, const InputBlock*, int64_t, int64_t, float*, int64_t,
                               bool);
template <size_t... I>
constexpr std::array<ColumnGroupFn, sizeof...(I)> column_group_table(std::index_sequence<I...>) {
  return {&column_group<int(I) + 1>...};
}
constexpr auto kColumnGroups = column_group_table(std::make_index_sequence<kMaxRows>{});

// Each thread a share of the groups of 8 columns, all rows of the quantized
// inputs `in`.
void mul_mat_rows(ggml_tensor* dst, const ggml_tensor* w, const InputBlock* in, int ith, int nth) {
  const int64_t nb = w->ne[0] / kBlock;
  const int64_t n_groups = w->ne[1] / 8;
  const int64_t n_rows = dst->ne[1];
  const int64_t dst_stride = dst->nb[1] / sizeof(float);
  const auto* weights = static_cast<const Q4x8*>(w->data);
  const int64_t g0 = n_groups * ith / nth;
  const int64_t g1 = n_groups * (ith + 1) / nth;
  if (n_rows <= kMaxRows) {  // one pass over each group's weights
    for (int64_t g = g0; g < g1; ++g) {
      kColumnGroups[size_t(n_rows - 1)](weights + g * nb, nb, in, n_rows, 0,
                                        static_cast<float*>(dst->data) + g * 8, dst_stride, false);
    }
    return;
  }
  for (int64_t b0 = 0; b0 < nb; b0 += kChunkBlocks) {
    const int64_t n_blocks = std::min(kChunkBlocks, nb - b0);
    for (int64_t c0 = 0; c0 < n_rows; c0 += kRowChunk) {
      const int64_t c1 = std::min(n_rows, c0 + kRowChunk);
      for (int64_t g = g0; g < g1; ++g) {
        const Q4x8* wg = weights + g * nb + b0;
        float* out = static_cast<float*>(dst->data) + g * 8;
        for (int64_t r0 = c0; r0 < c1; r0 += kMaxRows) {
          const int64_t rows = std::min<int64_t>(kMaxRows, c1 - r0);
          kColumnGroups[size_t(rows - 1)](wg, n_blocks, in + b0 * n_rows, n_rows, r0, out, dst_stride,
                                          b0 > 0);
        }
      }
    }
  }
}

void mul_mat_kernel(ggml_tensor* dst, int ith, int nth, void*) {
  mul_mat_rows(dst, dst->src[0], static_cast<const InputBlock*>(dst->src[1]->data), ith, nth);
}

// src[1] = x in F32: each thread quantizes all of it first.
void mul_mat_f32_kernel(ggml_tensor* dst, int ith, int nth, void*) {
  const ggml_tensor* x = dst->src[1];
  thread_local std::vector<InputBlock> in;
  const int64_t total = x->ne[0] / kBlock * x->ne[1];
  in.resize(size_t(total));
  quantize_blocks(x, in.data(), 0, total);
  mul_mat_rows(dst, dst->src[0], in.data(), ith, nth);
}

}  // namespace

bool q4_rows_cpu() {
  return cpu_has_vnni512();
}

bool q4_rows_supported(const ggml_tensor* w) {
  return q4_rows_cpu() && is_q4x8(w);
}

ggml_tensor* q4_rows_quantize(ggml_context* ctx, ggml_tensor* x) {
  GGML_ASSERT(x->type == GGML_TYPE_F32 && x->nb[0] == sizeof(float) && x->ne[0] % kBlock == 0);
  GGML_ASSERT(x->ne[2] == 1 && x->ne[3] == 1);
  ggml_tensor* args[] = {x};
  return ggml_custom_4d(ctx, GGML_TYPE_I8, int64_t(sizeof(InputBlock)) * x->ne[1], x->ne[0] / kBlock, 1, 1,
                        args, 1, quantize_kernel, GGML_N_TASKS_MAX, nullptr);
}

ggml_tensor* q4_rows_mul_mat(ggml_context* ctx, ggml_tensor* w, ggml_tensor* xq) {
  GGML_ASSERT(xq->type == GGML_TYPE_I8 && xq->ne[1] == w->ne[0] / kBlock);
  const int64_t n_rows = xq->ne[0] / int64_t(sizeof(InputBlock));
  ggml_tensor* args[] = {w, xq};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, w->ne[1], n_rows, 1, 1, args, 2, mul_mat_kernel, GGML_N_TASKS_MAX,
                        nullptr);
}

ggml_tensor* q4_rows_mul_mat_f32(ggml_context* ctx, ggml_tensor* w, ggml_tensor* x) {
  GGML_ASSERT(x->type == GGML_TYPE_F32 && x->nb[0] == sizeof(float) && x->ne[0] == w->ne[0]);
  GGML_ASSERT(x->ne[0] % kBlock == 0 && x->ne[2] == 1 && x->ne[3] == 1);
  ggml_tensor* args[] = {w, x};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, w->ne[1], x->ne[1], 1, 1, args, 2, mul_mat_f32_kernel,
                        GGML_N_TASKS_MAX, nullptr);
}

}  // namespace graft

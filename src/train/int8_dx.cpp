#include "train/int8_dx.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include <ggml-cpu.h>

namespace graft {

namespace {

constexpr int kBlock = 32;    // values per block (Q8_0's)
constexpr int kColumns = 16;  // columns of W per Q8x16
constexpr int kMaxRows = 8;   // rows of dy per pass over a Q8x16 strip (their sums stay in registers)
constexpr int64_t kChunkBlocks = 128;  // blocks of K per pass: a strip of 70 KB, dy's rows 5 KB each
constexpr int64_t kRowChunk = 64;      // rows of dy per pass: with kChunkBlocks, 320 KB, held in L2

// One row's 32 values of dy, quantized: q as 8 dwords of 4 bytes each, the
// scale (F16-rounded, as ggml keeps it) and -128 times the sum of q, which
// turns the products with W's values plus 128 back into products with W's.
struct DyBlock {
  int32_t q[8];
  float d;
  int32_t bias;
};
static_assert(sizeof(DyBlock) == 40 && sizeof(DyBlock) % sizeof(int32_t) == 0);

#define GRAFT_VNNI512 __attribute__((target("avx512f,avx512bw,avx512vnni,f16c,fma")))

// dy's blocks in out[b * n_rows + r]. Rounds as ggml's Q8_0 quantization of
// an activation does: scale max|x| / 127 kept as F16, x * 127 / max|x|
// rounded to nearest even.
GRAFT_VNNI512 void quantize_dy(const ggml_tensor* dy, DyBlock* out) {
  const int64_t n_rows = dy->ne[1];
  const int64_t nb = dy->ne[0] / kBlock;
  for (int64_t i = 0; i < nb * n_rows; ++i) {
    const int64_t b = i / n_rows;
    const int64_t r = i % n_rows;
    const float* src =
        reinterpret_cast<const float*>(static_cast<const char*>(dy->data) + r * dy->nb[1]) + b * kBlock;
    const __m512 v0 = _mm512_loadu_ps(src);
    const __m512 v1 = _mm512_loadu_ps(src + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const __m512 scale = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, scale));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, scale));
    DyBlock& o = out[i];
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o.q), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o.q + 4), _mm512_cvtsepi32_epi8(q1));
    o.d = _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
    o.bias = -128 * _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
  }
}

// dst[r][0..15] (+)= sum over n_blocks blocks of W^T's 16 rows times dy's
// row r, for rows r < R. Each block's integer sums are exact; each is scaled
// and added with one fused multiply-add, in block order.
template <int R>
GRAFT_VNNI512 void tile(const Q8x16* w, const DyBlock* a, int64_t a_stride, int64_t n_blocks, float* dst,
                        int64_t ldd, bool add) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = add ? _mm512_loadu_ps(dst + r * ldd) : _mm512_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const Q8x16& blk = w[b];
    __m512i q[8];
    for (int j = 0; j < 8; ++j) q[j] = _mm512_loadu_si512(blk.q[j]);
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.d)));
    const DyBlock* ab = a + b * a_stride;
    for (int r = 0; r < R; ++r) {
      __m512i s = _mm512_set1_epi32(ab[r].bias);
      for (int j = 0; j < 8; ++j) s = _mm512_dpbusd_epi32(s, q[j], _mm512_set1_epi32(ab[r].q[j]));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(ab[r].d)), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(dst + r * ldd, acc[r]);
}

using TileFn = void (*)(const Q8x16*, const DyBlock*, int64_t, int64_t, float*, int64_t, bool);
template <size_t... I>
constexpr std::array<TileFn, sizeof...(I)> tile_table(std::index_sequence<I...>) {
  return {&tile<int(I) + 1>...};
}
constexpr auto kTiles = tile_table(std::make_index_sequence<kMaxRows>{});

// dst: F32 [n_in, n_rows]; src[0] = W^T (Q8x16 rows), src[1] = dy. Each
// thread quantizes all of dy (a few percent of the product's time; a node of
// its own would need a place in the graph's order, which the backward's
// rewrite does not give) and computes a share of the 16-column strips, all
// rows; K in chunks, each chunk's sums added to the previous ones in order,
// so the result does not depend on the thread count.
void product_kernel(ggml_tensor* dst, int ith, int nth, void*) {
  const ggml_tensor* wt = dst->src[0];
  const ggml_tensor* dy = dst->src[1];
  const int64_t n_rows = dst->ne[1];
  const int64_t n_strips = dst->ne[0] / kColumns;
  const int64_t nb = wt->ne[0] / int64_t(sizeof(Q8x16));
  const int64_t ldd = int64_t(dst->nb[1] / sizeof(float));
  const int64_t s0 = n_strips * ith / nth;
  const int64_t s1 = n_strips * (ith + 1) / nth;
  if (s0 == s1) return;
  thread_local std::vector<DyBlock> quantized;
  quantized.resize(size_t(nb * n_rows));
  quantize_dy(dy, quantized.data());
  const auto* w = static_cast<const Q8x16*>(wt->data);
  const DyBlock* a = quantized.data();
  auto* out = static_cast<float*>(dst->data);
  for (int64_t b0 = 0; b0 < nb; b0 += kChunkBlocks) {
    const int64_t n_blocks = std::min(kChunkBlocks, nb - b0);
    for (int64_t c0 = 0; c0 < n_rows; c0 += kRowChunk) {
      const int64_t c1 = std::min(n_rows, c0 + kRowChunk);
      for (int64_t s = s0; s < s1; ++s) {
        for (int64_t r0 = c0; r0 < c1; r0 += kMaxRows) {
          const int64_t rows = std::min<int64_t>(kMaxRows, c1 - r0);
          kTiles[size_t(rows - 1)](w + s * nb + b0, a + b0 * n_rows + r0, n_rows, n_blocks,
                                   out + r0 * ldd + s * kColumns, ldd, b0 > 0);
        }
      }
    }
  }
}

}  // namespace

bool int8_dx_cpu() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("f16c") &&
                          __builtin_cpu_supports("fma");
  return has;
}

ggml_tensor* new_q8x16(ggml_context* ctx, int64_t n_in, int64_t n_out) {
  GGML_ASSERT(n_in % kColumns == 0 && n_out % kBlock == 0);
  return ggml_new_tensor_2d(ctx, GGML_TYPE_I8, int64_t(sizeof(Q8x16)) * (n_out / kBlock), n_in / kColumns);
}

void set_q8x16_blocks(ggml_tensor* wt, int64_t o0, int64_t n_blocks, const void* q8_0_blocks) {
  struct BlockQ8_0 {  // ggml's block_q8_0
    uint16_t d;
    int8_t qs[kBlock];
  };
  static_assert(sizeof(BlockQ8_0) == 34);
  GGML_ASSERT(o0 % kBlock == 0);
  const int64_t nb = wt->ne[0] / int64_t(sizeof(Q8x16));
  const int64_t n_in = wt->ne[1] * kColumns;
  auto* dst = static_cast<Q8x16*>(wt->data);
  const auto* src = static_cast<const BlockQ8_0*>(q8_0_blocks);
  for (int64_t i = 0; i < n_in; ++i) {
    const int c = int(i % kColumns);
    for (int64_t k = 0; k < n_blocks; ++k) {
      const BlockQ8_0& in = src[i * n_blocks + k];
      Q8x16& t = dst[(i / kColumns) * nb + o0 / kBlock + k];
      t.d[c] = in.d;
      for (int j = 0; j < kBlock; ++j) t.q[j / 4][4 * c + j % 4] = uint8_t(int(in.qs[j]) + 128);
    }
  }
}

ggml_tensor* int8_dx(ggml_context* ctx, ggml_tensor* wt, ggml_tensor* dy) {
  GGML_ASSERT(wt->type == GGML_TYPE_I8 && wt->ne[0] % int64_t(sizeof(Q8x16)) == 0);
  GGML_ASSERT(dy->type == GGML_TYPE_F32 && dy->nb[0] == sizeof(float) && dy->ne[2] == 1 && dy->ne[3] == 1);
  const int64_t nb = wt->ne[0] / int64_t(sizeof(Q8x16));
  GGML_ASSERT(dy->ne[0] == nb * kBlock);
  ggml_tensor* args[] = {wt, dy};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, wt->ne[1] * kColumns, dy->ne[1], 1, 1, args, 2, product_kernel,
                        GGML_N_TASKS_MAX, nullptr);
}

}  // namespace graft

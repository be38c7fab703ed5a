#include "model/q8_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <ggml-backend.h>

#include "model/cpu_repack.h"
#include "model/q4_rows.h"
#include "model/rows_input.h"

namespace graft {

namespace {

constexpr int kBlock = kInputBlock;
constexpr size_t kBlockBytes = 34;  // ggml's block_q8_0: an F16 scale, then 32 signed bytes
// Many rows: the rows in chunks whose inputs stay in L2 while each of the
// thread's column groups passes over them (the group's weights then stay
// in L1 or L2 for the whole chunk).
constexpr int64_t kChunkInputBytes = 256 * 1024;
// Rows and weight row pairs per pass (more rows, then more passes; 4 x 4
// beat 8 x 2 at 8 rows here): 16 accumulators, and each pair's weights and
// scales, in registers.
constexpr int kTileRows = 4;
constexpr int kTilePairs = 4;

struct Weights {
  const uint8_t* data;  // block b of weight row c at data + c * stride + b * kBlockBytes
  size_t stride;
  int64_t n_out;
};

// Output columns [c0, c0 + n_cols) (n_cols <= 2P) of rows r0 .. r0 + R - 1,
// over all nb blocks. Weight rows 2p and 2p + 1 of the pass share the
// vectors of pair p: lanes 0-7 the first, 8-15 the second, lane i of each
// the sum of the products of bytes 4i .. 4i + 3 (as ggml's lanes).
template <int R, int P>
GRAFT_VNNI512 void tile(const Weights& w, int64_t c0, int n_cols, int64_t nb, const InputBlock* in,
                        int64_t n_rows, int64_t r0, float* dst, int64_t dst_stride) {
  const uint8_t* col[2 * P];
  for (int c = 0; c < 2 * P; ++c)  // past the last column: the last again (computed, not stored)
    col[c] = w.data + size_t(c0 + std::min(c, n_cols - 1)) * w.stride;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));  // also 128 as the unsigned operand
  const __m512i zero = _mm512_setzero_si512();
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const size_t at = size_t(b) * kBlockBytes;
    __m512i wq[P];
    __m512 dw[P];
    for (int p = 0; p < P; ++p) {
      const uint8_t* lo = col[2 * p] + at;
      const uint8_t* hi = col[2 * p + 1] + at;
      prefetch_ahead(lo, kBlockBytes);
      prefetch_ahead(hi, kBlockBytes);
      // Weights + 128, unsigned (as the first operand of the VNNI multiply).
      wq[p] = _mm512_xor_si512(
          _mm512_inserti64x4(
              _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo + 2))),
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi + 2)), 1),
          flip);
      uint16_t d_lo, d_hi;
      std::memcpy(&d_lo, lo, sizeof(d_lo));
      std::memcpy(&d_hi, hi, sizeof(d_hi));
      dw[p] = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(short(d_lo))),
                                                      _mm_set1_epi16(short(d_hi)), 1));
    }
    const InputBlock* x = in + b * n_rows + r0;
    for (int r = 0; r < R; ++r) {
      const __m512i xq = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r].q)));
      // -128 times the sum of each lane's 4 inputs, so that each lane's
      // sum of (weight + 128) x input comes out as the sum of weight x input.
      const __m512i start = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, flip, xq));
      const __m512 dx = _mm512_set1_ps(x[r].d);
      for (int p = 0; p < P; ++p) {
        const __m512i s = _mm512_dpbusd_epi32(start, wq[p], xq);
        // The scale as ggml forms it (weight's times input's, in F32), then
        // one fused multiply-add per block and lane, in block order.
        acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(dw[p], dx), _mm512_cvtepi32_ps(s), acc[r][p]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    float* out = dst + (r0 + r) * dst_stride + c0;
    for (int p = 0; p < P; ++p) {
      alignas(64) float l[16];
      _mm512_store_ps(l, acc[r][p]);
      for (int h = 0; h < 2 && 2 * p + h < n_cols; ++h) {
        const float* v = l + 8 * h;
        out[2 * p + h] = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
      }
    }
  }
}

// One row: weight row after weight row, each read front to back, as ggml
// reads them (the memory then streams as fast as it can; a pass over
// several weight rows at once reads slower here), the inputs' part of each
// lane's start computed once per thread.
GRAFT_VNNI512_VL void one_row(const Weights& w, int64_t c0, int64_t c1, int64_t nb, const InputBlock* in,
                              float* out) {
  thread_local std::vector<int32_t> starts;  // 8 lanes per block
  starts.resize(size_t(nb) * 8);
  auto* start = reinterpret_cast<__m256i*>(starts.data());
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i zero = _mm256_setzero_si256();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in[b].q));
    _mm256_storeu_si256(start + b, _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, flip, x)));
  }
  for (int64_t c = c0; c < c1; ++c) {
    const uint8_t* row = w.data + size_t(c) * w.stride;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + size_t(b) * kBlockBytes;
      prefetch_ahead(blk, kBlockBytes);
      const __m256i wq =
          _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)), flip);
      const __m256i s = _mm256_dpbusd_epi32(_mm256_loadu_si256(start + b), wq,
                                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in[b].q)));
      uint16_t dw;
      std::memcpy(&dw, blk, sizeof(dw));
      const float d = _cvtsh_ss(dw) * in[b].d;
      acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s), acc);
    }
    alignas(32) float v[8];
    _mm256_store_ps(v, acc);
    out[c] = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
  }
}

using TileFn = void (*)(const Weights&, int64_t, int, int64_t, const InputBlock*, int64_t, int64_t, float*,
                        int64_t);

// tile<R, P> for R = 1 .. kTileRows, at index R - 1.
template <int P, size_t... I>
constexpr std::array<TileFn, sizeof...(I)> tiles_of(std::index_sequence<I...>) {
  return {&tile<int(I) + 1, P>...};
}
constexpr auto kTiles = tiles_of<kTilePairs>(std::make_index_sequence<kTileRows>{});

// Each thread a share of the column groups, all rows of the inputs `in`.
void mul_mat_rows(ggml_tensor* dst, const ggml_tensor* wt, const InputBlock* in, int ith, int nth) {
  const Weights w{static_cast<const uint8_t*>(wt->data), wt->nb[1], wt->ne[1]};
  const int64_t nb = wt->ne[0] / kBlock;
  const int64_t n_rows = dst->ne[1];
  const int64_t dst_stride = dst->nb[1] / sizeof(float);
  auto* out = static_cast<float*>(dst->data);
  if (n_rows == 1) {
    one_row(w, w.n_out * ith / nth, w.n_out * (ith + 1) / nth, nb, in, out);
    return;
  }
  const int64_t width = 2 * kTilePairs;
  const int64_t n_groups = (w.n_out + width - 1) / width;
  const int64_t g0 = n_groups * ith / nth;
  const int64_t g1 = n_groups * (ith + 1) / nth;
  const int64_t chunk = std::max<int64_t>(
      kTileRows, kChunkInputBytes / (nb * int64_t(sizeof(InputBlock))) / kTileRows * kTileRows);
  for (int64_t c0 = 0; c0 < n_rows; c0 += chunk) {
    const int64_t c1 = std::min(n_rows, c0 + chunk);
    for (int64_t g = g0; g < g1; ++g) {
      const int n_cols = int(std::min(width, w.n_out - g * width));
      for (int64_t r0 = c0; r0 < c1; r0 += kTileRows) {
        const int64_t rows = std::min<int64_t>(kTileRows, c1 - r0);
        kTiles[size_t(rows - 1)](w, g * width, n_cols, nb, in, n_rows, r0, out, dst_stride);
      }
    }
  }
}

void mul_mat_kernel(ggml_tensor* dst, int ith, int nth, void*) {
  mul_mat_rows(dst, dst->src[0], static_cast<const InputBlock*>(dst->src[1]->data), ith, nth);
}

}  // namespace

bool q8_rows_supported(const ggml_tensor* w) {
  static const bool vl = __builtin_cpu_supports("avx512vl");
  if (!q4_rows_cpu() || !vl || w->type != GGML_TYPE_Q8_0 || !stored_as_file(w)) return false;
  return w->nb[0] == kBlockBytes && w->ne[2] == 1 && w->ne[3] == 1;
}

ggml_tensor* q8_rows_mul_mat(ggml_context* ctx, ggml_tensor* w, ggml_tensor* xq) {
  GGML_ASSERT(xq->type == GGML_TYPE_I8 && xq->ne[1] == w->ne[0] / kBlock);
  const int64_t n_rows = xq->ne[0] / int64_t(sizeof(InputBlock));
  ggml_tensor* args[] = {w, xq};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, w->ne[1], n_rows, 1, 1, args, 2, mul_mat_kernel, GGML_N_TASKS_MAX,
                        nullptr);
}

}  // namespace graft

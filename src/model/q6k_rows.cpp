#include "model/q6k_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "model/cpu_repack.h"
#include "model/q4_rows.h"
#include "model/rows_input.h"

namespace graft {

namespace {

constexpr int kBlock = kKInputBlock;  // Q6_K's blocks and the inputs'

// A Q6_K block as files store it: weight 128j + 32k + i (j < 2, k < 4,
// i < 32) is q - 32 for the 6-bit q whose low 4 bits are in ql[64j + i +
// 32 (k % 2)] (the low nibble for k < 2, the high for k >= 2) and high 2 bits
// are bits 2k, 2k + 1 of qh[32j + i]; weights 16g .. 16g + 15 scaled by
// scales[g], all by d.
struct Q6KBlock {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
static_assert(sizeof(Q6KBlock) == 210);

// One block of 8 Q6_K weight rows (columns), unpacked once for every input
// row. Each 512-bit vector holds a pair of columns, 2p in its low half and
// 2p + 1 in its high half, and each half's dword m is ggml's lane m.
struct Q6Unpacked {
  uint8_t q[4][8][64];  // pair p, inputs 32t .. 32t + 31: the columns' 6-bit q
  // Pair p, chunks t = 2h and 2h + 1: word 2m + s of a column's half is the
  // scale of chunk 2h + s's bytes 4m .. 4m + 3 (scales[4h + 2s + m / 4]).
  int16_t scales[4][4][32];
  int16_t offset[4][32];  // pair p: -32 times each column's 16 scales
  __m512 d[4];            // pair p: 8 lanes of each column's d
};

GRAFT_VNNI512 inline __m512i pair_256(const void* lo, const void* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(lo))),
                            _mm256_loadu_si256(static_cast<const __m256i*>(hi)), 1);
}

GRAFT_VNNI512 void unpack_q6(const Q6KBlock* const* col, Q6Unpacked& u) {
  // Word 16c + 2m + s of pair p's scales for chunks 2h, 2h + 1 (c the
  // column of the pair) from the pair's 32 scale words.
  struct Tables {
    int16_t idx[4][32];
  };
  alignas(64) static constexpr Tables kTables = [] {
    Tables t{};
    for (int h = 0; h < 4; ++h)
      for (int c = 0; c < 2; ++c)
        for (int m = 0; m < 8; ++m)
          for (int s = 0; s < 2; ++s) t.idx[h][16 * c + 2 * m + s] = int16_t(16 * c + 4 * h + 2 * s + m / 4);
    return t;
  }();
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i high2 = _mm512_set1_epi8(0x30);
  for (int p = 0; p < 4; ++p) {
    const Q6KBlock& x0 = *col[2 * p];
    const Q6KBlock& x1 = *col[2 * p + 1];
    for (int j = 0; j < 2; ++j) {
      const __m512i ql0 = pair_256(x0.ql + 64 * j, x1.ql + 64 * j);
      const __m512i ql1 = pair_256(x0.ql + 64 * j + 32, x1.ql + 64 * j + 32);
      const __m512i qh = pair_256(x0.qh + 32 * j, x1.qh + 32 * j);
      // 16-bit shifts: the bits that cross into a neighbouring byte are masked off.
      const __m512i q[4] = {
          _mm512_or_si512(_mm512_and_si512(ql0, low4), _mm512_and_si512(_mm512_slli_epi16(qh, 4), high2)),
          _mm512_or_si512(_mm512_and_si512(ql1, low4), _mm512_and_si512(_mm512_slli_epi16(qh, 2), high2)),
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql0, 4), low4), _mm512_and_si512(qh, high2)),
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql1, 4), low4),
                          _mm512_and_si512(_mm512_srli_epi16(qh, 2), high2)),
      };
      for (int k = 0; k < 4; ++k) _mm512_store_si512(u.q[p][4 * j + k], q[k]);
    }
    const __m512i scales = _mm512_cvtepi8_epi16(_mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x0.scales))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(x1.scales)), 1));
    for (int h = 0; h < 4; ++h)
      _mm512_store_si512(u.scales[p][h], _mm512_permutexvar_epi16(_mm512_load_si512(kTables.idx[h]), scales));
    _mm512_store_si512(u.offset[p], _mm512_sub_epi16(_mm512_setzero_si512(), _mm512_slli_epi16(scales, 5)));
    u.d[p] = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(_cvtsh_ss(x0.d)), _mm512_set1_ps(_cvtsh_ss(x1.d)));
  }
}

// Columns [8g, 8g + n_cols) of rows 0 .. n - 1 (row r's blocks at in + r *
// nb), n_cols <= 8 (the missing columns repeat the last one and are not
// stored), as ggml's one-row Q6_K dot product sums them (see q6k_rows.h).
GRAFT_VNNI512 void q6_column_group(const Q6KBlock* w, int64_t nb, int n_cols, const KInputBlock* in, int n,
                                   float* dst, int64_t dst_stride) {
  alignas(64) Q6Unpacked u;
  __m512 acc[kKMaxRows][4];
  for (int r = 0; r < n; ++r)
    for (int p = 0; p < 4; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const Q6KBlock* col[8];
    for (int c = 0; c < 8; ++c) col[c] = w + std::min(c, n_cols - 1) * nb + b;
    unpack_q6(col, u);
    for (int r = 0; r < n; ++r) {
      const KInputBlock& a = in[r * nb + b];
      const __m512i bsums =
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bsums)));
      __m512i sum[4];
      for (int p = 0; p < 4; ++p) sum[p] = _mm512_madd_epi16(_mm512_load_si512(u.offset[p]), bsums);
      for (int h = 0; h < 4; ++h) {
        const __m512i q0 =
            _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + 64 * h)));
        const __m512i q1 =
            _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + 64 * h + 32)));
        for (int p = 0; p < 4; ++p) {
          // 4 products a lane, each sum within 16 bits (63 * 127 * 4).
          const __m512i s0 =
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_load_si512(u.q[p][2 * h]), q0);
          const __m512i s1 =
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_load_si512(u.q[p][2 * h + 1]), q1);
          sum[p] = _mm512_add_epi32(
              sum[p], _mm512_madd_epi16(_mm512_mask_blend_epi16(0xAAAAAAAA, s0, _mm512_slli_epi32(s1, 16)),
                                        _mm512_load_si512(u.scales[p][h])));
        }
      }
      const __m512 da = _mm512_set1_ps(a.d);
      for (int p = 0; p < 4; ++p)
        acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(u.d[p], da), _mm512_cvtepi32_ps(sum[p]), acc[r][p]);
    }
  }
  for (int r = 0; r < n; ++r) {
    alignas(64) float lanes[4][16];
    for (int p = 0; p < 4; ++p) _mm512_store_ps(lanes[p], acc[r][p]);
    for (int c = 0; c < n_cols; ++c) dst[r * dst_stride + c] = sum_lanes8(lanes[c / 2] + 8 * (c % 2));
  }
}

// Column (weight row) `w` of R rows (row r's blocks at in + r * nb), its
// blocks unpacked in registers once for all R rows and read front to back
// as ggml reads them. A 512-bit vector holds 64 inputs, two of ggml's 32
// (its halves); each half's dword m is ggml's lane m, and the halves are
// added (exactly, as integers) before each block's sums are scaled.
template <int R>
GRAFT_VNNI512 void q6_column(const Q6KBlock* w, int64_t nb, const KInputBlock* in, float* dst,
                             int64_t dst_stride) {
  // Word 2d + s of chunk pair j's scales (d = 8 half + m): the scale of
  // inputs 128j + 32 (half + 2s) + 4m .. + 3.
  struct Tables {
    int16_t idx[2][32];
  };
  alignas(64) static constexpr Tables kTables = [] {
    Tables t{};
    for (int j = 0; j < 2; ++j)
      for (int d = 0; d < 16; ++d)
        for (int s = 0; s < 2; ++s) t.idx[j][2 * d + s] = int16_t(8 * j + 4 * s + 2 * (d / 8) + (d % 8) / 4);
    return t;
  }();
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i high2 = _mm512_set1_epi8(0x30);
  // qh's bits for the low and the high half: 2k, 2k + 1 to bits 4, 5.
  const __m512i up_w = _mm512_mask_blend_epi16(0xFFFF0000, _mm512_set1_epi16(4), _mm512_set1_epi16(2));
  const __m512i down_w = _mm512_mask_blend_epi16(0xFFFF0000, _mm512_setzero_si512(), _mm512_set1_epi16(2));
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const Q6KBlock& x = w[b];
    prefetch_ahead(&x);
    __m512i q[2][2], scales[2];
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales)));
    for (int j = 0; j < 2; ++j) {
      const __m512i ql = _mm512_loadu_si512(x.ql + 64 * j);
      const __m512i qh =
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh + 32 * j)));
      q[j][0] =
          _mm512_or_si512(_mm512_and_si512(ql, low4), _mm512_and_si512(_mm512_sllv_epi16(qh, up_w), high2));
      q[j][1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                _mm512_and_si512(_mm512_srlv_epi16(qh, down_w), high2));
      scales[j] = _mm512_permutexvar_epi16(_mm512_load_si512(kTables.idx[j]), _mm512_zextsi256_si512(sc));
    }
    const __m256i offset = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc, 5));
    const float dw = _cvtsh_ss(x.d);
    for (int r = 0; r < R; ++r) {
      const KInputBlock& a = in[r * nb + b];
      __m512i sum = _mm512_setzero_si512();
      for (int j = 0; j < 2; ++j) {
        // 4 products a lane, each sum within 16 bits (63 * 127 * 4).
        const __m512i s0 =
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[j][0], _mm512_loadu_si512(a.q + 128 * j));
        const __m512i s1 =
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[j][1], _mm512_loadu_si512(a.q + 128 * j + 64));
        sum = _mm512_add_epi32(
            sum,
            _mm512_madd_epi16(_mm512_mask_blend_epi16(0xAAAAAAAA, s0, _mm512_slli_epi32(s1, 16)), scales[j]));
      }
      const __m256i lanes = _mm256_add_epi32(
          _mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1)),
          _mm256_madd_epi16(offset, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bsums))));
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(a.d * dw), _mm256_cvtepi32_ps(lanes), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc[r]);
    dst[r * dst_stride] = sum_lanes8(lanes);
  }
}

constexpr KColumnFn<Q6KBlock> kColumn[kKMaxRows] = {&q6_column<1>, &q6_column<2>, &q6_column<3>,
                                                    &q6_column<4>, &q6_column<5>, &q6_column<6>,
                                                    &q6_column<7>, &q6_column<8>};

// More rows: each thread a share of the groups of 8 columns (the last may
// have fewer).
void q6_mul_mat_groups(ggml_tensor* dst, int ith, int nth) {
  const ggml_tensor* w = dst->src[0];
  const auto* in = static_cast<const KInputBlock*>(dst->src[1]->data);
  const int64_t nb = w->ne[0] / kBlock;
  const int64_t n_out = w->ne[1];
  const int64_t n_groups = (n_out + 7) / 8;
  const int64_t n_rows = dst->ne[1];
  const int64_t dst_stride = dst->nb[1] / sizeof(float);
  const auto* weights = static_cast<const Q6KBlock*>(w->data);
  auto* out = static_cast<float*>(dst->data);
  const int64_t g0 = n_groups * ith / nth;
  const int64_t g1 = n_groups * (ith + 1) / nth;
  const int64_t chunk = k_rows_per_chunk(nb);
  for (int64_t c0 = 0; c0 < n_rows; c0 += chunk) {
    const int64_t c1 = std::min(n_rows, c0 + chunk);
    for (int64_t g = g0; g < g1; ++g) {
      const int n_cols = int(std::min<int64_t>(8, n_out - 8 * g));
      for (int64_t r0 = c0; r0 < c1; r0 += kKMaxRows) {
        q6_column_group(weights + g * 8 * nb, nb, n_cols, in + r0 * nb,
                        int(std::min<int64_t>(kKMaxRows, c1 - r0)), out + r0 * dst_stride + g * 8,
                        dst_stride);
      }
    }
  }
}

// A column at a time reads the weights as one stream, as ggml does: for 1
// row 1.4-1.8x ggml's rate (2 threads, Zen 5), where 8 columns at a time
// (8 streams) read memory slower than ggml. Beyond 8 rows, 8 columns at a
// time unpack each block once for more rows and spend fewer instructions a
// row (16 rows: 2.5-2.7x ggml's rate, 512 rows 2.9-3.2x; one column at a
// time 2.0-2.5x and 1.7-2.2x).
void q6_mul_mat_kernel(ggml_tensor* dst, int ith, int nth, void*) {
  if (dst->ne[1] <= kKMaxRows)
    k_rows_by_column(dst, ith, nth, kColumn);
  else
    q6_mul_mat_groups(dst, ith, nth);
}

}  // namespace

bool q6k_rows_supported(const ggml_tensor* w) {
  return q4_rows_cpu() && w->type == GGML_TYPE_Q6_K && w->ne[0] % kBlock == 0 && w->ne[2] == 1 &&
         w->ne[3] == 1 && ggml_is_contiguous(w) && stored_as_file(w);
}

ggml_tensor* q6k_rows_mul_mat(ggml_context* ctx, ggml_tensor* w, ggml_tensor* xq) {
  return k_rows_product(ctx, w, xq, q6_mul_mat_kernel);
}

}  // namespace graft

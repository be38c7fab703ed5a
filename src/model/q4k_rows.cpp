#include "model/q4k_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <ggml-backend.h>
#include <ggml-cpu.h>

#include "model/cpu_repack.h"
#include "model/q4_rows.h"
#include "model/rows_input.h"

namespace graft {

namespace {

constexpr int kBlock = kKInputBlock;   // Q4_K, Q5_K and the 8-bit input blocks
constexpr int kMaxRows = 16;           // Q4_K: rows in groups of four per pass over the weights
constexpr int kQ5MaxRows = kKMaxRows;  // Q5_K: rows per pass (four accumulators each stay in registers)
using InputBlock = KInputBlock;

// Row r of x, block b, quantized into o. ggml quantizes rows in groups of
// four (`grouped`) and the rest one at a time, and when the largest
// magnitude occurs as both signs the two take a different sign for d: the
// grouped one the positive, the single one the first in the row.
GRAFT_VNNI512 void quantize_block(const float* src, bool grouped, InputBlock& o) {
  __m512 v[16];
  __m512 amax_v = _mm512_setzero_ps();
  for (int i = 0; i < 16; ++i) {
    v[i] = _mm512_loadu_ps(src + 16 * i);
    amax_v = _mm512_max_ps(amax_v, _mm512_abs_ps(v[i]));
  }
  const float amax = _mm512_reduce_max_ps(amax_v);
  if (amax == 0.0f) {
    std::memset(&o, 0, sizeof(o));
    return;
  }
  bool positive = false;
  const __m512 pos = _mm512_set1_ps(amax);
  const __m512 neg = _mm512_set1_ps(-amax);
  for (int i = 0; i < 16; ++i) {
    const __mmask16 p = _mm512_cmp_ps_mask(v[i], pos, _CMP_EQ_OQ);
    const __mmask16 n = _mm512_cmp_ps_mask(v[i], neg, _CMP_EQ_OQ);
    if (grouped) {
      if (p) positive = true;
    } else if (p | n) {  // the first of the largest
      positive = (p & -(p | n)) != 0;
      break;
    }
  }
  const float iscale = positive ? -127.0f / amax : 127.0f / amax;
  const __m512 scale = _mm512_set1_ps(iscale);
  __m512i q16[16], sums[8];
  for (int i = 0; i < 16; ++i) {
    // Round to nearest even, as the default rounding mode does.
    q16[i] = _mm512_cvtps_epi32(_mm512_mul_ps(v[i], scale));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o.q + 16 * i), _mm512_cvtsepi32_epi8(q16[i]));
    sums[i / 2] = i % 2 ? _mm512_add_epi32(sums[i / 2], q16[i]) : q16[i];
  }
  for (int p = 0; p < 4; ++p) {
    const int32_t lo = _mm512_reduce_add_epi32(sums[2 * p]);
    const int32_t hi = _mm512_reduce_add_epi32(sums[2 * p + 1]);
    o.sums[p] = int32_t((uint32_t(lo) & 0xFFFF) | (uint32_t(hi) << 16));
  }
  for (int i = 0; i < 16; ++i) o.bsums[i] = int16_t(_mm512_reduce_add_epi32(q16[i]));
  o.d = 1.0f / iscale;
  o.pad[0] = o.pad[1] = o.pad[2] = 0;
}

// Rows of x quantized into dst[r * n_blocks + b], each thread a share of the blocks.
void quantize_kernel(ggml_tensor* dst, int ith, int nth, void* userdata) {
  const ggml_tensor* x = dst->src[0];
  const int64_t nb = x->ne[0] / kBlock;
  const int64_t n_rows = x->ne[1];
  // Q5_K (userdata set): ggml quantizes every row alone.
  const int64_t grouped_rows = userdata ? 0 : n_rows - n_rows % 4;
  const int64_t total = nb * n_rows;
  auto* out = static_cast<InputBlock*>(dst->data);
  for (int64_t i = total * ith / nth; i < total * (ith + 1) / nth; ++i) {
    const int64_t r = i / nb;
    const int64_t b = i % nb;
    const float* src =
        reinterpret_cast<const float*>(static_cast<const char*>(x->data) + r * x->nb[1]) + b * kBlock;
    quantize_block(src, r < grouped_rows, out[i]);
  }
}

// Q4Kx8's scales and mins of sub-blocks 4h .. 4h + 3 (cpu_repack.h) as 16
// bytes each: the 8 columns' scales, then their mins.
GRAFT_VNNI512 inline __m512i unpack_scales(__m512i lo, __m512i hi, int h) {
  // Dword t of sub-block g's four: t = 0: scales 0-3 (of its bytes 0-3),
  // 1: scales 4-7 (bytes 8-11 and the top bits of 0-3), 2: mins 0-3 (bytes
  // 4-7), 3: mins 4-7 (bytes 8-11 and the top bits of 4-7).
  struct Tables {
    int32_t base[2][16], rest[2][16], shift[16];
  };
  alignas(64) static constexpr Tables kTables = [] {
    Tables t{};
    for (int half = 0; half < 2; ++half) {
      for (int g = 0; g < 4; ++g) {
        for (int k = 0; k < 4; ++k) {
          t.base[half][4 * g + k] = 3 * (4 * half + g) + (k < 2 ? 0 : 1);
          t.rest[half][4 * g + k] = 3 * (4 * half + g) + 2;
          t.shift[4 * g + k] = k == 3 ? 4 : 0;
        }
      }
    }
    return t;
  }();
  const int32_t* base_idx = kTables.base[h];
  const int32_t* rest_idx = kTables.rest[h];
  const int32_t* shift = kTables.shift;
  const __m512i base = _mm512_permutex2var_epi32(lo, _mm512_load_si512(base_idx), hi);
  const __m512i rest = _mm512_permutex2var_epi32(lo, _mm512_load_si512(rest_idx), hi);
  const __m512i low6 = _mm512_and_si512(base, _mm512_set1_epi8(63));
  const __m512i high2 =
      _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(base, 6), _mm512_set1_epi8(3)), 4);
  const __m512i low4 =
      _mm512_and_si512(_mm512_srlv_epi32(rest, _mm512_load_si512(shift)), _mm512_set1_epi8(15));
  return _mm512_mask_blend_epi32(0xAAAA, low6, _mm512_or_si512(low4, high2));
}

// One row's sums over 64 inputs p of a block (lo, hi: the weights' nibbles
// unpacked) times each half's scale: lane 2c + s column c's sum over its
// weights 4s .. 4s + 3 of each 8.
GRAFT_VNNI512 inline __m512i scaled_sums(const int8_t* q, const __m512i* lo, const __m512i* hi,
                                         __m512i scales) {
  __m512i s0 = _mm512_setzero_si512();
  __m512i s1 = _mm512_setzero_si512();
  for (int k = 0; k < 4; ++k) {
    int64_t q0, q1;
    std::memcpy(&q0, q + 8 * k, 8);
    std::memcpy(&q1, q + 32 + 8 * k, 8);
    s0 = _mm512_dpbusd_epi32(s0, lo[k], _mm512_set1_epi64(q0));
    s1 = _mm512_dpbusd_epi32(s1, hi[k], _mm512_set1_epi64(q1));
  }
  // Each half's sum (16 products, within 16 bits) times its scale.
  return _mm512_madd_epi16(_mm512_mask_blend_epi16(0xAAAAAAAA, s0, _mm512_slli_epi32(s1, 16)), scales);
}

// Which 16-bit word of two sub-blocks' unpack_scales each lane takes: word
// 2l + h of lane l = 2c + s is column c's scale (min) of the 64 inputs' half h.
struct LaneScaleIndex {
  __m512i scales, mins;
};
GRAFT_VNNI512 inline LaneScaleIndex lane_scale_index() {
  alignas(64) int16_t scale_idx[32], min_idx[32];
  for (int l = 0; l < 16; ++l) {
    for (int h = 0; h < 2; ++h) {
      scale_idx[2 * l + h] = int16_t(16 * h + l / 2);
      min_idx[2 * l + h] = int16_t(16 * h + 8 + l / 2);
    }
  }
  return {_mm512_load_si512(scale_idx), _mm512_load_si512(min_idx)};
}

// A block's super-scales d and dmin, each column's on both of its lanes, and
// its sub-block scales and mins unpacked (two sub-blocks per 256 bits).
struct BlockScales {
  __m512 d, dmin;
  __m512i sm[2];
};
GRAFT_VNNI512 inline BlockScales block_scales(const Q4Kx8& blk) {
  const __m512i pair = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  const __m512i sc_lo = _mm512_loadu_si512(blk.scales);
  const __m512i sc_hi =
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.scales + 64)));
  return {_mm512_permutexvar_ps(pair, _mm512_castps256_ps512(_mm256_cvtph_ps(
                                          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.d))))),
          _mm512_permutexvar_ps(pair, _mm512_castps256_ps512(_mm256_cvtph_ps(
                                          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.dmin))))),
          {unpack_scales(sc_lo, sc_hi, 0), unpack_scales(sc_lo, sc_hi, 1)}};
}

// Inputs 64p .. 64p + 63 of a block: each lane's scale and min words, and
// the weights' low and high nibbles.
struct BlockPart {
  __m512i scales, mins;
  __m512i lo[4], hi[4];
};
GRAFT_VNNI512 inline BlockPart block_part(const Q4Kx8& blk, const BlockScales& bs,
                                          const LaneScaleIndex& index, int p) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i words = _mm512_cvtepu8_epi16(p % 2 ? _mm512_extracti64x4_epi64(bs.sm[p / 2], 1)
                                                   : _mm512_castsi512_si256(bs.sm[p / 2]));
  BlockPart part;
  part.scales = _mm512_permutexvar_epi16(index.scales, words);
  part.mins = _mm512_permutexvar_epi16(index.mins, words);
  for (int k = 0; k < 4; ++k) {
    const __m512i raw = _mm512_loadu_si512(blk.qs + 64 * (4 * p + k));
    part.lo[k] = _mm512_and_si512(raw, low4);
    part.hi[k] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
  }
  return part;
}

// Columns [8g, 8g + 8) of R rows (row r's blocks at in + r * nb), over all
// nb blocks, the sums scaled and added once per 256 inputs (ggml's order for
// the rows after the groups of four; paired_column_group has theirs). Lane
// 2c + s of the products holds column c's weights 4s .. 4s + 3 of each 8
// (see Q4Kx8), so both lanes of column c end up with its sums.
template <int R>
GRAFT_VNNI512 void column_group(const Q4Kx8* w, int64_t nb, const InputBlock* in, float* dst,
                                int64_t dst_stride) {
  const LaneScaleIndex index = lane_scale_index();
  __m512 acc[R], acc_min[R];
  for (int r = 0; r < R; ++r) acc[r] = acc_min[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const Q4Kx8& blk = w[b];
    const BlockScales bs = block_scales(blk);
    __m512i isum[R], imin[R];
    for (int r = 0; r < R; ++r) isum[r] = imin[r] = _mm512_setzero_si512();
    for (int p = 0; p < 4; ++p) {  // 64 inputs: sub-blocks 2p, 2p + 1
      const BlockPart part = block_part(blk, bs, index, p);
      for (int r = 0; r < R; ++r) {
        const InputBlock& a = in[r * nb + b];
        isum[r] = _mm512_add_epi32(isum[r], scaled_sums(a.q + 64 * p, part.lo, part.hi, part.scales));
        imin[r] = _mm512_add_epi32(imin[r], _mm512_madd_epi16(part.mins, _mm512_set1_epi32(a.sums[p])));
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 da = _mm512_set1_ps(in[r * nb + b].d);
      const __m512i col = _mm512_add_epi32(isum[r], _mm512_shuffle_epi32(isum[r], _MM_PERM_CDAB));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(col), _mm512_mul_ps(bs.d, da), acc[r]);
      acc_min[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(imin[r]), _mm512_mul_ps(bs.dmin, da), acc_min[r]);
    }
  }
  const __m512i even = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 14, 12, 10, 8, 6, 4, 2, 0);
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(dst + r * dst_stride,
                     _mm512_castps512_ps256(_mm512_permutexvar_ps(even, _mm512_sub_ps(acc[r], acc_min[r]))));
  }
}

// Columns [8g, 8g + 8) of R rows (R a multiple of four), the sums scaled
// and added once per 64 inputs (ggml's order for rows in groups of four), in
// pairs of rows: lane 2c of a pair's accumulators holds column c of its
// first row, lane 2c + 1 that of its second, so the convert, scale and add
// after each 64 inputs serve two rows at once.
template <int R>
GRAFT_VNNI512 void paired_column_group(const Q4Kx8* w, int64_t nb, const InputBlock* in, float* dst,
                                       int64_t dst_stride) {
  static_assert(R % 2 == 0);
  constexpr int kPairs = R / 2;
  // Lane 2c takes a's lane 2c (even) or 2c + 1 (odd), lane 2c + 1 b's.
  const __m512i take_even = _mm512_set_epi32(30, 14, 28, 12, 26, 10, 24, 8, 22, 6, 20, 4, 18, 2, 16, 0);
  const __m512i take_odd = _mm512_set_epi32(31, 15, 29, 13, 27, 11, 25, 9, 23, 7, 21, 5, 19, 3, 17, 1);
  const LaneScaleIndex index = lane_scale_index();
  __m512 acc[kPairs], acc_min[kPairs];
  for (int r = 0; r < kPairs; ++r) acc[r] = acc_min[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const Q4Kx8& blk = w[b];
    const BlockScales bs = block_scales(blk);
    for (int p = 0; p < 4; ++p) {  // 64 inputs: sub-blocks 2p, 2p + 1
      const BlockPart part = block_part(blk, bs, index, p);
      for (int r = 0; r < kPairs; ++r) {
        const InputBlock& a = in[(2 * r) * nb + b];
        const InputBlock& c = in[(2 * r + 1) * nb + b];
        const __m512i sa = scaled_sums(a.q + 64 * p, part.lo, part.hi, part.scales);
        const __m512i sc = scaled_sums(c.q + 64 * p, part.lo, part.hi, part.scales);
        // Both lanes of a column hold its mins' sum: one from each row.
        const __m512i m =
            _mm512_mask_blend_epi32(0xAAAA, _mm512_madd_epi16(part.mins, _mm512_set1_epi32(a.sums[p])),
                                    _mm512_madd_epi16(part.mins, _mm512_set1_epi32(c.sums[p])));
        const __m512i col = _mm512_add_epi32(_mm512_permutex2var_epi32(sa, take_even, sc),
                                             _mm512_permutex2var_epi32(sa, take_odd, sc));
        const __m512 da = _mm512_mask_blend_ps(0xAAAA, _mm512_set1_ps(a.d), _mm512_set1_ps(c.d));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(col), _mm512_mul_ps(bs.d, da), acc[r]);
        acc_min[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(bs.dmin, da), acc_min[r]);
      }
    }
  }
  const __m512i even = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 15, 13, 11, 9, 7, 5, 3, 1);
  for (int r = 0; r < kPairs; ++r) {
    const __m512 diff = _mm512_sub_ps(acc[r], acc_min[r]);
    _mm256_storeu_ps(dst + (2 * r) * dst_stride, _mm512_castps512_ps256(_mm512_permutexvar_ps(even, diff)));
    _mm256_storeu_ps(dst + (2 * r + 1) * dst_stride,
                     _mm512_castps512_ps256(_mm512_permutexvar_ps(odd, diff)));
  }
}

using ColumnGroupFn = void (*)(const Q4Kx8*, int64_t, const InputBlock*, float*, int64_t);

// Rows in groups of four, four to sixteen per pass (ggml's order for them).
ColumnGroupFn grouped_kernel(int64_t rows) {
  switch (rows) {
    case 16:
      return &paired_column_group<16>;
    case 12:
      return &paired_column_group<12>;
    case 8:
      return &paired_column_group<8>;
    default:
      return &paired_column_group<4>;
  }
}

// The last n_rows % 4 rows, one to three (ggml's order for them).
ColumnGroupFn single_kernel(int64_t rows) {
  return rows == 1 ? &column_group<1> : rows == 2 ? &column_group<2> : &column_group<3>;
}

// Each thread a share of the groups of 8 columns, all rows.
void mul_mat_kernel(ggml_tensor* dst, int ith, int nth, void*) {
  const ggml_tensor* w = dst->src[0];
  const auto* in = static_cast<const InputBlock*>(dst->src[1]->data);
  const int64_t nb = w->ne[0] / kBlock;
  const int64_t n_groups = w->ne[1] / 8;
  const int64_t n_rows = dst->ne[1];
  const int64_t grouped_rows = n_rows - n_rows % 4;
  const int64_t dst_stride = dst->nb[1] / sizeof(float);
  const auto* weights = static_cast<const Q4Kx8*>(w->data);
  auto* out = static_cast<float*>(dst->data);
  const int64_t g0 = n_groups * ith / nth;
  const int64_t g1 = n_groups * (ith + 1) / nth;
  const int64_t chunk = k_rows_per_chunk(nb);
  for (int64_t c0 = 0; c0 < grouped_rows; c0 += chunk) {
    const int64_t c1 = std::min(grouped_rows, c0 + chunk);
    for (int64_t g = g0; g < g1; ++g) {
      for (int64_t r0 = c0; r0 < c1; r0 += kMaxRows) {
        const int64_t rows = std::min<int64_t>(kMaxRows, c1 - r0);
        grouped_kernel(rows)(weights + g * nb, nb, in + r0 * nb, out + r0 * dst_stride + g * 8, dst_stride);
      }
    }
  }
  if (grouped_rows == n_rows) return;
  for (int64_t g = g0; g < g1; ++g) {
    single_kernel(n_rows - grouped_rows)(weights + g * nb, nb, in + grouped_rows * nb,
                                         out + grouped_rows * dst_stride + g * 8, dst_stride);
  }
}

// A Q5_K block as files store it: Q4_K's, with each weight's fifth bit in
// qh: bit 2j (2j + 1) of qh[i] for weight i of sub-block 2j (2j + 1).
struct Q5KBlock {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
static_assert(sizeof(Q5KBlock) == 176);

// Sub-block g's 6-bit scale and min of a Q4_K or Q5_K block's scales.
inline void k_scale_min(const uint8_t* q, int g, int& scale, int& min) {
  if (g < 4) {
    scale = q[g] & 63;
    min = q[g + 4] & 63;
  } else {
    scale = (q[g + 4] & 15) | ((q[g - 4] >> 6) << 4);
    min = (q[g + 4] >> 4) | ((q[g] >> 6) << 4);
  }
}

// One block of 8 Q5_K rows (weight rows c = output columns), unpacked once
// for every input row: for 64 inputs j (sub-blocks 2j + h) and columns 2p,
// 2p + 1, their 5-bit weights as bytes, column 2p's 32 then 2p + 1's.
struct Q5Unpacked {
  uint8_t q[4][4][2][64];
  int32_t scales[4][4]
                [16];   // lanes 0-7 column 2p's, 8-15 2p + 1's scales of sub-blocks 2j, 2j + 1 (16 bits each)
  int16_t mins[2][32];  // columns 4k .. 4k + 3: their 8 mins each
  __m512 d[4];          // lanes as scales: the columns' scales d
  __m512 dmin[2];       // lanes 4c' .. 4c' + 3 of column 4k + c': its dmin
};

GRAFT_VNNI512 void unpack_q5(const Q5KBlock* const* col, Q5Unpacked& u) {
  alignas(64) float d[16], dmin[16];
  for (int c = 0; c < 8; ++c) {
    const Q5KBlock& x = *col[c];
    int sc[8], mn[8];
    for (int g = 0; g < 8; ++g) k_scale_min(x.scales, g, sc[g], mn[g]);
    for (int j = 0; j < 4; ++j) {
      const int32_t pair = sc[2 * j] | sc[2 * j + 1] << 16;
      for (int l = 0; l < 8; ++l) u.scales[j][c / 2][8 * (c % 2) + l] = pair;
    }
    for (int g = 0; g < 8; ++g) u.mins[c / 4][8 * (c % 4) + g] = int16_t(mn[g]);
    const float xd = _cvtsh_ss(x.d);
    const float xm = _cvtsh_ss(x.dmin);
    for (int l = 0; l < 8; ++l) d[(c % 2) * 8 + l] = xd;
    if (c % 2) u.d[c / 2] = _mm512_load_ps(d);
    for (int l = 0; l < 4; ++l) dmin[4 * (c % 4) + l] = xm;
    if (c % 4 == 3) u.dmin[c / 4] = _mm512_load_ps(dmin);
  }
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i bit4 = _mm512_set1_epi8(0x10);
  for (int p = 0; p < 4; ++p) {
    const Q5KBlock& x0 = *col[2 * p];
    const Q5KBlock& x1 = *col[2 * p + 1];
    const __m512i qh = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0.qh))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x1.qh)), 1);
    for (int j = 0; j < 4; ++j) {
      const __m512i qs = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0.qs + 32 * j))),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x1.qs + 32 * j)), 1);
      // Bit 2j + h of each qh byte moved to bit 4.
      const int s0 = 2 * j, s1 = 2 * j + 1;
      const __m512i h0 =
          s0 <= 4 ? _mm512_slli_epi16(qh, unsigned(4 - s0)) : _mm512_srli_epi16(qh, unsigned(s0 - 4));
      const __m512i h1 =
          s1 <= 4 ? _mm512_slli_epi16(qh, unsigned(4 - s1)) : _mm512_srli_epi16(qh, unsigned(s1 - 4));
      const __m512i lo = _mm512_or_si512(_mm512_and_si512(qs, low4), _mm512_and_si512(h0, bit4));
      const __m512i hi =
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(qs, 4), low4), _mm512_and_si512(h1, bit4));
      _mm512_store_si512(u.q[j][p][0], lo);
      _mm512_store_si512(u.q[j][p][1], hi);
    }
  }
}

// Columns [8g, 8g + 8) of rows 0 .. n - 1 (row r's blocks at in + r * nb)
// as ggml's one-row Q5_K dot product sums them: per column, 8 lanes of 4
// inputs each, every lane's integer block sum scaled and added on its own,
// block by block; the lanes added pairwise at the end (4 apart, then 2,
// then 1); the mins' sums scaled and added one block at a time beside them.
GRAFT_VNNI512 void q5_column_group(const Q5KBlock* w, int64_t nb, const InputBlock* in, int n, float* dst,
                                   int64_t dst_stride) {
  alignas(64) Q5Unpacked u;
  __m512 acc[kQ5MaxRows][4], acc_min[kQ5MaxRows][2];
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < 4; ++p) acc[r][p] = _mm512_setzero_ps();
    acc_min[r][0] = acc_min[r][1] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const Q5KBlock* col[8];
    for (int c = 0; c < 8; ++c) col[c] = w + c * nb + b;
    unpack_q5(col, u);
    for (int r = 0; r < n; ++r) {
      const InputBlock& a = in[r * nb + b];
      __m512i sum[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                        _mm512_setzero_si512()};
      for (int j = 0; j < 4; ++j) {
        const __m512i q0 =
            _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + 64 * j)));
        const __m512i q1 =
            _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + 64 * j + 32)));
        for (int p = 0; p < 4; ++p) {
          // 4 products a lane, each sum within 16 bits.
          const __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_load_si512(u.q[j][p][0]), q0);
          const __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_load_si512(u.q[j][p][1]), q1);
          sum[p] = _mm512_add_epi32(
              sum[p], _mm512_madd_epi16(_mm512_mask_blend_epi16(0xAAAAAAAA, s0, _mm512_slli_epi32(s1, 16)),
                                        _mm512_load_si512(u.scales[j][p])));
        }
      }
      const __m512 da = _mm512_set1_ps(a.d);
      for (int p = 0; p < 4; ++p)
        acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(u.d[p], da), _mm512_cvtepi32_ps(sum[p]), acc[r][p]);
      const __m512i sums = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.sums)));
      const __m512 neg_da = _mm512_set1_ps(-a.d);
      for (int k = 0; k < 2; ++k) {
        __m512i m = _mm512_madd_epi16(_mm512_loadu_si512(u.mins[k]), sums);
        m = _mm512_add_epi32(m, _mm512_shuffle_epi32(m, _MM_PERM_CDAB));
        m = _mm512_add_epi32(m, _mm512_shuffle_epi32(m, _MM_PERM_BADC));
        acc_min[r][k] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(u.dmin[k], neg_da), acc_min[r][k]);
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    alignas(64) float lanes[4][16], mins[2][16];
    for (int p = 0; p < 4; ++p) _mm512_store_ps(lanes[p], acc[r][p]);
    for (int k = 0; k < 2; ++k) _mm512_store_ps(mins[k], acc_min[r][k]);
    for (int c = 0; c < 8; ++c)
      dst[r * dst_stride + c] = sum_lanes8(lanes[c / 2] + 8 * (c % 2)) + mins[c / 4][4 * (c % 4)];
  }
}

// Each thread a share of the groups of 8 columns, all rows.
void q5_mul_mat_kernel(ggml_tensor* dst, int ith, int nth, void*) {
  const ggml_tensor* w = dst->src[0];
  const auto* in = static_cast<const InputBlock*>(dst->src[1]->data);
  const int64_t nb = w->ne[0] / kBlock;
  const int64_t n_groups = w->ne[1] / 8;
  const int64_t n_rows = dst->ne[1];
  const int64_t dst_stride = dst->nb[1] / sizeof(float);
  const auto* weights = static_cast<const Q5KBlock*>(w->data);
  auto* out = static_cast<float*>(dst->data);
  const int64_t g0 = n_groups * ith / nth;
  const int64_t g1 = n_groups * (ith + 1) / nth;
  const int64_t chunk = k_rows_per_chunk(nb);
  for (int64_t c0 = 0; c0 < n_rows; c0 += chunk) {
    const int64_t c1 = std::min(n_rows, c0 + chunk);
    for (int64_t g = g0; g < g1; ++g) {
      for (int64_t r0 = c0; r0 < c1; r0 += kQ5MaxRows) {
        q5_column_group(weights + g * 8 * nb, nb, in + r0 * nb, int(std::min<int64_t>(kQ5MaxRows, c1 - r0)),
                        out + r0 * dst_stride + g * 8, dst_stride);
      }
    }
  }
}

int q5_userdata;  // the quantize kernel's mark for Q5_K inputs

// The rows of x quantized (userdata: &q5_userdata for Q5_K).
ggml_tensor* quantize_op(ggml_context* ctx, ggml_tensor* x, void* userdata) {
  GGML_ASSERT(x->type == GGML_TYPE_F32 && x->nb[0] == sizeof(float) && x->ne[0] % kBlock == 0);
  GGML_ASSERT(x->ne[2] == 1 && x->ne[3] == 1);
  ggml_tensor* args[] = {x};
  return ggml_custom_4d(ctx, GGML_TYPE_I8, int64_t(sizeof(InputBlock)) * (x->ne[0] / kBlock), x->ne[1], 1, 1,
                        args, 1, quantize_kernel, GGML_N_TASKS_MAX, userdata);
}

}  // namespace

ggml_tensor* k_rows_product(ggml_context* ctx, ggml_tensor* w, ggml_tensor* xq, ggml_custom_op_t kernel) {
  GGML_ASSERT(xq->type == GGML_TYPE_I8 &&
              xq->ne[0] == int64_t(sizeof(KInputBlock)) * (w->ne[0] / kKInputBlock));
  ggml_tensor* args[] = {w, xq};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, w->ne[1], xq->ne[1], 1, 1, args, 2, kernel, GGML_N_TASKS_MAX,
                        nullptr);
}

bool q4k_rows_supported(const ggml_tensor* w) {
  return q4_rows_cpu() && w->type == GGML_TYPE_Q4_K && w->ne[0] % kBlock == 0 && is_q4kx8(w);
}

ggml_tensor* q4k_rows_quantize(ggml_context* ctx, ggml_tensor* x) {
  return quantize_op(ctx, x, nullptr);
}

ggml_tensor* q4k_rows_mul_mat(ggml_context* ctx, ggml_tensor* w, ggml_tensor* xq) {
  return k_rows_product(ctx, w, xq, mul_mat_kernel);
}

bool q5k_rows_supported(const ggml_tensor* w, int64_t n_rows) {
  return n_rows >= 3 && q4_rows_cpu() && w->type == GGML_TYPE_Q5_K && w->ne[0] % kBlock == 0 &&
         w->ne[1] % 8 == 0 && w->ne[2] == 1 && w->ne[3] == 1 && ggml_is_contiguous(w) && stored_as_file(w);
}

ggml_tensor* q5k_rows_quantize(ggml_context* ctx, ggml_tensor* x) {
  return quantize_op(ctx, x, &q5_userdata);
}

ggml_tensor* q5k_rows_mul_mat(ggml_context* ctx, ggml_tensor* w, ggml_tensor* xq) {
  return k_rows_product(ctx, w, xq, q5_mul_mat_kernel);
}

}  // namespace graft

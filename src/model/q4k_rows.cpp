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

constexpr int kBlock = kKInputBlock;  // Q4_K, Q5_K and the 8-bit input blocks
constexpr int kMaxRows = 16;          // Q4_K: rows in groups of four per pass over the weights
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
    prefetch_ahead(&blk);
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
    prefetch_ahead(&blk);
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

// Column (weight row) `w` of R rows (row r's blocks at in + r * nb), its
// blocks unpacked in registers once for all R rows and read front to back
// as ggml reads them. A 512-bit vector holds 64 inputs as they lie: chunk j's
// sub-block 2j (the low nibbles of qs[32j ..]) in its low half, 2j + 1 (the
// high nibbles) in its high half, so each half's dword m is ggml's lane m of
// one sub-block. Two chunks' lane sums (within 16 bits) are scaled by one
// multiply-add of words and the halves added, all exact integers, before
// each block's lanes are scaled and added as ggml scales and adds them.
template <int R>
GRAFT_VNNI512 void q5_column(const Q5KBlock* w, int64_t nb, const InputBlock* in, float* dst,
                             int64_t dst_stride) {
  // Word 2d + s of chunk pair p's scales (dword d, its half h = d / 8): the
  // scale of sub-block 2 (2p + s) + h.
  struct Tables {
    int16_t idx[2][32];
  };
  alignas(64) static constexpr Tables kTables = [] {
    Tables t{};
    for (int p = 0; p < 2; ++p)
      for (int d = 0; d < 16; ++d)
        for (int s = 0; s < 2; ++s) t.idx[p][2 * d + s] = int16_t(2 * (2 * p + s) + d / 8);
    return t;
  }();
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i bit4 = _mm512_set1_epi8(0x10);
  const __m512i nibble = _mm512_mask_blend_epi16(0xFFFF0000, _mm512_setzero_si512(), _mm512_set1_epi16(4));
  __m512i fifth[4];  // chunk j: qh's bit 2j for the low half, 2j + 1 for the high
  for (int j = 0; j < 4; ++j)
    fifth[j] = _mm512_mask_blend_epi8(0xFFFFFFFF00000000ULL, _mm512_set1_epi8(char(1 << (2 * j))),
                                      _mm512_set1_epi8(char(1 << (2 * j + 1))));
  __m256 acc[R];
  float summs[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_setzero_ps();
    summs[r] = 0.0f;
  }
  for (int64_t b = 0; b < nb; ++b) {
    const Q5KBlock& x = w[b];
    prefetch_ahead(&x);
    // The 6-bit scales (words 0-7) and mins (8-15) of the 12 bytes: for
    // sub-blocks 0-3 the low 6 bits of bytes 0-3 and 4-7; for 4-7 the
    // nibbles of bytes 8-11 below the top 2 bits of bytes 0-3 and 4-7.
    uint32_t packed[3];
    std::memcpy(packed, x.scales, sizeof(packed));
    const uint32_t low6 = 0x3F3F3F3F, low4b = 0x0F0F0F0F, top2 = 0x03030303;
    const __m256i sm = _mm256_cvtepu8_epi16(_mm_set_epi32(
        int(((packed[2] >> 4) & low4b) | (((packed[1] >> 6) & top2) << 4)), int(packed[1] & low6),
        int((packed[2] & low4b) | (((packed[0] >> 6) & top2) << 4)), int(packed[0] & low6)));
    const __m512i scales[2] = {
        _mm512_permutexvar_epi16(_mm512_load_si512(kTables.idx[0]), _mm512_zextsi256_si512(sm)),
        _mm512_permutexvar_epi16(_mm512_load_si512(kTables.idx[1]), _mm512_zextsi256_si512(sm))};
    const __m128i mins = _mm256_extracti128_si256(sm, 1);
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh)));
    __m512i q[4];
    for (int j = 0; j < 4; ++j) {
      const __m512i qs =
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * j)));
      const __m512i q4 = _mm512_and_si512(_mm512_srlv_epi16(qs, nibble), low4);
      q[j] = _mm512_mask_add_epi8(q4, _mm512_test_epi8_mask(qh, fifth[j]), q4, bit4);
    }
    const float xd = _cvtsh_ss(x.d);
    const float xm = _cvtsh_ss(x.dmin);
    for (int r = 0; r < R; ++r) {
      const InputBlock& a = in[r * nb + b];
      __m512i sum = _mm512_setzero_si512();
      for (int p = 0; p < 2; ++p) {
        // 4 products a lane, each sum within 16 bits (31 * 128 * 4).
        const __m512i s0 =
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[2 * p], _mm512_loadu_si512(a.q + 128 * p));
        const __m512i s1 =
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[2 * p + 1], _mm512_loadu_si512(a.q + 128 * p + 64));
        sum = _mm512_add_epi32(
            sum,
            _mm512_madd_epi16(_mm512_mask_blend_epi16(0xAAAAAAAA, s0, _mm512_slli_epi32(s1, 16)), scales[p]));
      }
      const __m256i lanes = _mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1));
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(a.d * xd), _mm256_cvtepi32_ps(lanes), acc[r]);
      // The mins' share: an exact integer, scaled and added one block at a time.
      __m128i m = _mm_madd_epi16(mins, _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.sums)));
      m = _mm_add_epi32(m, _mm_shuffle_epi32(m, 0x4E));
      m = _mm_add_epi32(m, _mm_shuffle_epi32(m, 0xB1));
      summs[r] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(-a.d * xm), _mm_cvtepi32_ps(m), _mm_set_ss(summs[r])));
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc[r]);
    dst[r * dst_stride] = sum_lanes8(lanes) + summs[r];
  }
}

constexpr KColumnFn<Q5KBlock> kQ5Column[kKMaxRows] = {&q5_column<1>, &q5_column<2>, &q5_column<3>,
                                                      &q5_column<4>, &q5_column<5>, &q5_column<6>,
                                                      &q5_column<7>, &q5_column<8>};

// Q5_K a column at a time for any number of rows: a stream of weights as
// ggml reads them, each block unpacked once for up to 8 rows. (Blocks of 8
// columns unpacked together, as for Q4_K, were slower for every count of
// rows: 1.3x this rate at 8 rows, 1.15x at 512.)
void q5_mul_mat_kernel(ggml_tensor* dst, int ith, int nth, void*) {
  k_rows_by_column(dst, ith, nth, kQ5Column);
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

bool q5k_rows_supported(const ggml_tensor* w) {
  return q4_rows_cpu() && w->type == GGML_TYPE_Q5_K && w->ne[0] % kBlock == 0 && w->ne[2] == 1 &&
         w->ne[3] == 1 && ggml_is_contiguous(w) && stored_as_file(w);
}

ggml_tensor* q5k_rows_quantize(ggml_context* ctx, ggml_tensor* x) {
  return quantize_op(ctx, x, &q5_userdata);
}

ggml_tensor* q5k_rows_mul_mat(ggml_context* ctx, ggml_tensor* w, ggml_tensor* xq) {
  return k_rows_product(ctx, w, xq, q5_mul_mat_kernel);
}

}  // namespace graft

#include "model/lora_ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include <immintrin.h>

#include <ggml-cpu.h>

#include "model/lora.h"

namespace graft {

namespace {

// This file is built without floating-point contraction: a multiply and an
// add stay two roundings, as ggml's separate ops round.
constexpr int64_t kChunk = 32;  // outputs whose accumulators stay in registers

// ggml's smallest SIMD step for dot products (AVX2's): below it, its F32
// dot product runs the scalar loop f32_tail_width describes.
constexpr int64_t kGgmlMinSimdDot = 32;

// The probes below ask ggml's own dot products, whose F16 conversions read
// tables ggml_cpu_init fills: a probe that runs before any graph (a test, the
// first adapter) must fill them first.
const ggml_type_traits_cpu* probe_traits(ggml_type type) {
  ggml_cpu_init();
  return ggml_get_type_traits_cpu(type);
}

void load_row(ggml_type type, const char* src, float* row, int64_t m) {
  if (type == GGML_TYPE_F16) {
    ggml_cpu_fp16_to_fp32(reinterpret_cast<const ggml_fp16_t*>(src), row, m);
  } else if (type == GGML_TYPE_BF16) {
    ggml_cpu_bf16_to_fp32(reinterpret_cast<const ggml_bf16_t*>(src), row, m);
  } else {
    std::copy_n(reinterpret_cast<const float*>(src), m, row);
  }
}

// out[o] += scale * sum_k w[k] * B[k][o] for o in [0, n), B's rows (F16 or
// BF16) `stride` bytes apart. Each product is exact in float; the sum runs
// over k in order, in double, as ggml's dot product sums short rows.

void add_rows_exact(float* out, const char* b, size_t stride, ggml_type type, const float* w, float scale,
                    int64_t rank, int64_t n) {
  const size_t es = ggml_type_size(type);
  for (int64_t o0 = 0; o0 < n; o0 += kChunk) {
    const int64_t m = std::min(kChunk, n - o0);
    double acc[kChunk] = {};
    float row[kChunk];
    for (int64_t k = 0; k < rank; ++k) {
      if (w[k] == 0.0f) continue;
      load_row(type, b + size_t(k) * stride + size_t(o0) * es, row, m);
      const float wk = w[k];
      for (int64_t j = 0; j < m; ++j) acc[j] += double(wk * row[j]);
    }
    for (int64_t j = 0; j < m; ++j) {
      const float term = float(acc[j]) * scale;
      out[o0 + j] = out[o0 + j] + term;
    }
  }
}

#if defined(__AVX512F__)
// 8 outputs of a B row (F16 or BF16) as doubles.
inline __m512d load8(ggml_type type, const char* src) {
  const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  if (type == GGML_TYPE_F16) return _mm512_cvtps_pd(_mm256_cvtph_ps(half));
  return _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16)));  // BF16
}

// add_rows_exact's arithmetic for 8 * kVecs outputs, their accumulators
// (doubles) in registers, summed over k in the same order. w[k] times an F16
// or BF16 value is exact in float, so one fused multiply-add in double rounds
// as adding that float product does, with no float multiply and no shuffles
// to widen it. Each pass reads 16 * kVecs bytes of each of B's rows in turn
// and prefetches those `ahead` bytes further on (the next blocks of B's
// stacks): the hardware's prefetch left the B side waiting on memory (graft
// bench, Q4_0 1B, 8 rows, 8 rank-16 adapters: 0.80 -> 0.85-0.9 of base).
template <int kVecs>
void add_block_exact_avx512(float* out, const char* b, size_t stride, ggml_type type, const float* w,
                            float scale, int64_t rank, size_t ahead) {
  const size_t es = ggml_type_size(type);
  __m512d acc[kVecs];
#pragma GCC unroll 16
  for (int v = 0; v < kVecs; ++v) acc[v] = _mm512_setzero_pd();
  for (int64_t k = 0; k < rank; ++k) {
    if (w[k] == 0.0f) continue;
    const char* row = b + size_t(k) * stride;
#pragma GCC unroll 8
    for (size_t l = 0; l < size_t(8 * kVecs) * es; l += 64) _mm_prefetch(row + ahead + l, _MM_HINT_T0);
    const __m512d wk = _mm512_set1_pd(double(w[k]));
#pragma GCC unroll 16
    for (int v = 0; v < kVecs; ++v)
      acc[v] = _mm512_fmadd_pd(wk, load8(type, row + size_t(8 * v) * es), acc[v]);
  }
  const __m256 s = _mm256_set1_ps(scale);
#pragma GCC unroll 16
  for (int v = 0; v < kVecs; ++v) {
    float* o = out + 8 * v;
    _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), _mm256_mul_ps(_mm512_cvtpd_ps(acc[v]), s)));
  }
}

void add_rows_exact_avx512(float* out, const char* b, size_t stride, ggml_type type, const float* w,
                           float scale, int64_t rank, int64_t n, size_t ahead) {
  const size_t es = ggml_type_size(type);
  int64_t o0 = 0;
  for (; o0 + 128 <= n; o0 += 128)
    add_block_exact_avx512<16>(out + o0, b + size_t(o0) * es, stride, type, w, scale, rank, ahead);
  for (; o0 + 8 <= n; o0 += 8)
    add_block_exact_avx512<1>(out + o0, b + size_t(o0) * es, stride, type, w, scale, rank, ahead);
  if (o0 < n) add_rows_exact(out + o0, b + size_t(o0) * es, stride, type, w, scale, rank, n - o0);
}
#endif

inline float fused(float a, float b, float c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return c + a * b;
#endif
}

// sum_k x[k] y[k] as ggml's F32 dot product sums a short row (below its SIMD
// step) when its compiler vectorizes the scalar loop `width` wide: products
// rounded and summed in order, the last n % width of them fused.
float tail_fused_dot(const float* x, const float* y, int64_t n, int64_t width) {
  const int64_t fused_from = n & ~(width - 1);
  float sum = 0.0f;
  for (int64_t k = 0; k < n; ++k) {
    if (k < fused_from) {
      const float product = x[k] * y[k];
      sum = sum + product;
    } else {
      sum = fused(x[k], y[k], sum);
    }
  }
  return sum;
}

// Whether ggml's own F32 dot product of random rows of length n (below 64)
// sums as tail_fused_dot does with this width.
bool tail_rule_fits(int64_t width, int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::array<float, 64> x{}, y{};
  for (int64_t k = 0; k < n; ++k) {
    x[size_t(k)] = uniform(rng);
    y[size_t(k)] = uniform(rng);
  }
  float want = 0.0f;
  probe_traits(GGML_TYPE_F32)->vec_dot(int(n), &want, 0, x.data(), 0, y.data(), 0, 1);
  const float got = tail_fused_dot(x.data(), y.data(), n, width);
  return std::memcmp(&want, &got, sizeof(float)) == 0;
}

// The width of that rule for the ggml this binary links, found once by
// asking ggml's own dot product on random rows of every short length: 4 with
// AVX2 and 8 with AVX-512 builds by GCC 12. 0: no width fits, and every F32
// term goes through ggml's dot product (add_rows_ggml_dot).
int64_t f32_tail_width() {
  static const int64_t width = [] {
    std::mt19937 rng(7);
    for (int64_t width : {4, 8, 16}) {
      bool fits = true;
      for (int trial = 0; trial < 4 * int(kGgmlMinSimdDot) && fits; ++trial)
        fits = tail_rule_fits(width, 1 + trial % (kGgmlMinSimdDot - 1), rng);
      if (fits) return width;
    }
    return int64_t(0);
  }();
  return width;
}

// The length below which ggml's F32 dot product follows tail_fused_dot's
// rule (its SIMD step: 64 in AVX-512 builds, 32 in AVX2 ones), found once by
// asking it on random rows of every length below 64; 0 without a width.
int64_t f32_in_order_below() {
  static const int64_t limit = [] {
    const int64_t width = f32_tail_width();
    if (width == 0) return int64_t(0);
    std::mt19937 rng(13);
    for (int64_t n = kGgmlMinSimdDot; n < 64; ++n) {
      for (int trial = 0; trial < 4; ++trial) {
        if (!tail_rule_fits(width, n, rng)) return kGgmlMinSimdDot;
      }
    }
    return int64_t(64);
  }();
  return limit;
}

// The same rule for F32 rows of B, vectorized over outputs: out[o] += scale *
// sum_k w[k] B[k][o], rank the adapter's own (add_b_term).
void add_rows_f32(float* out, const char* b, size_t stride, const float* w, float scale, int64_t rank,
                  int64_t n, int64_t width) {
  const int64_t fused_from = rank & ~(width - 1);
  for (int64_t o0 = 0; o0 < n; o0 += kChunk) {
    const int64_t m = std::min(kChunk, n - o0);
    float acc[kChunk] = {};
    for (int64_t k = 0; k < rank; ++k) {
      const float* row = reinterpret_cast<const float*>(b + size_t(k) * stride) + o0;
      const float wk = w[k];
      if (k < fused_from) {
        for (int64_t j = 0; j < m; ++j) acc[j] = acc[j] + wk * row[j];
      } else {
        for (int64_t j = 0; j < m; ++j) acc[j] = fused(wk, row[j], acc[j]);
      }
    }
    for (int64_t j = 0; j < m; ++j) {
      const float term = acc[j] * scale;
      out[o0 + j] = out[o0 + j] + term;
    }
  }
}

// out[o] += scale * (B[.][o] . w) for o in [0, n) through ggml's own dot
// product for the type (F32 always; F16 and BF16 from ggml's SIMD step up),
// so each sum is rounded exactly as ggml_mul_mat rounds it on this CPU: the
// order of its vector accumulators and of its contracted scalar tail depends
// on the CPU and on how ggml was compiled. B's column of a block of outputs is
// gathered into rows first. rank is the adapter's own (add_b_term).
void add_rows_ggml_dot(float* out, const char* b, size_t stride, ggml_type type, const float* w, float scale,
                       int64_t rank, int64_t n) {
  if (rank == 0) return;
  const ggml_type_traits_cpu* traits = ggml_get_type_traits_cpu(type);
  const size_t es = ggml_type_size(type);
  // A x in the dot product's input type, as ggml_mul_mat converts it.
  std::vector<char> wq(size_t(rank) * ggml_type_size(traits->vec_dot_type));
  if (traits->vec_dot_type == GGML_TYPE_F32) {
    std::memcpy(wq.data(), w, size_t(rank) * sizeof(float));
  } else {
    ggml_get_type_traits_cpu(traits->vec_dot_type)->from_float(w, wq.data(), rank);
  }
  std::vector<char> rows(size_t(kChunk) * size_t(rank) * es);
  for (int64_t o0 = 0; o0 < n; o0 += kChunk) {
    const int64_t m = std::min(kChunk, n - o0);
    for (int64_t k = 0; k < rank; ++k) {
      const char* src = b + size_t(k) * stride + size_t(o0) * es;
      for (int64_t j = 0; j < m; ++j)
        std::memcpy(&rows[(size_t(j) * size_t(rank) + size_t(k)) * es], src + size_t(j) * es, es);
    }
    for (int64_t j = 0; j < m; ++j) {
      float dot = 0.0f;
      traits->vec_dot(int(rank), &dot, 0, &rows[size_t(j) * size_t(rank) * es], 0, wq.data(), 0, 1);
      const float term = dot * scale;
      out[o0 + j] = out[o0 + j] + term;
    }
  }
}

// A x rounded as ggml's matmul rounds its input for a weight of this type.
float round_input(ggml_type type, float a) {
  if (type == GGML_TYPE_F16) return ggml_fp16_to_fp32(ggml_fp32_to_fp16(a));
  if (type == GGML_TYPE_BF16) return ggml_bf16_to_fp32(ggml_fp32_to_bf16(a));
  return a;
}

// The length below which ggml's dot product for an F16 or BF16 row sums
// every product in order, in double (add_rows_exact's arithmetic): its SIMD
// step, 64 in AVX-512 builds and 32 in AVX2 ones. Found once per type by
// asking ggml's own dot product on random rows of every length below 64; 0
// if even short rows differ (then every term goes through add_rows_ggml_dot).
int64_t in_order_below(ggml_type type) {
  static const std::array<int64_t, 2> limits = [] {
    std::array<int64_t, 2> found{};
    for (const ggml_type t : {GGML_TYPE_F16, GGML_TYPE_BF16}) {
      const ggml_type_traits_cpu* traits = probe_traits(t);
      const size_t es = ggml_type_size(t);
      std::mt19937 rng(5);
      std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
      std::vector<float> x(64), y(64), xr(64), yr(64);
      std::vector<char> xq(64 * es), yq(64 * es);
      int64_t first_miss = 64;
      for (int64_t n = 1; n < first_miss; ++n) {
        for (int trial = 0; trial < 4 && n < first_miss; ++trial) {
          for (float& v : x) v = uniform(rng);
          for (float& v : y) v = uniform(rng);
          traits->from_float(x.data(), xq.data(), n);
          traits->from_float(y.data(), yq.data(), n);
          load_row(t, xq.data(), xr.data(), n);
          load_row(t, yq.data(), yr.data(), n);
          double sum = 0.0;
          for (int64_t k = 0; k < n; ++k) sum += double(xr[size_t(k)] * yr[size_t(k)]);
          float want = 0.0f;
          traits->vec_dot(int(n), &want, 0, xq.data(), 0, yq.data(), 0, 1);
          const float got = float(sum);
          if (std::memcmp(&want, &got, sizeof(float)) != 0) first_miss = n;
        }
      }
      found[t == GGML_TYPE_F16 ? 0 : 1] = first_miss >= 64 ? 64 : first_miss >= 32 ? 32 : 0;
    }
    return found;
  }();
  return type == GGML_TYPE_F16 ? limits[0] : type == GGML_TYPE_BF16 ? limits[1] : 0;
}

#if defined(__AVX512F__)
// ggml's AVX-512 dot products (ggml_vec_dot_f16, ggml_vec_dot_f32) over the
// first rank - rank % 64 elements of one output's row: element k goes to
// lane k % 64 of four 16-wide accumulators by fused multiply-adds, and the
// lanes are added 0 + 32 and 16 + 48, then 0 + 16, then in
// _mm512_reduce_add_ps's tree (8 + 0, 4 + 0, 2 + 0, 1 + 0). Here each lane is
// one zmm over 16 outputs, so every step is one instruction for all of them;
// `load` gives B's row k at those outputs as floats.
template <typename Load>
__m512 simd_order_sum(const char* b, size_t stride, const float* w, int64_t np, Load load) {
  __m512 lane[64];
  for (__m512& l : lane) l = _mm512_setzero_ps();
  for (int64_t k = 0; k < np; ++k)
    lane[k & 63] = _mm512_fmadd_ps(load(b + size_t(k) * stride), _mm512_set1_ps(w[k]), lane[k & 63]);
  for (int l = 0; l < 32; ++l) lane[l] = _mm512_add_ps(lane[l], lane[l + 32]);
  for (int width = 16; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) lane[l] = _mm512_add_ps(lane[l + width], lane[l]);
  }
  return lane[0];
}

// out[o] += scale * sum_k w[k] B[k][o] for 16 outputs of F16 rows, as
// ggml's F16 dot product sums it: simd_order_sum, then the last rank % 64
// products added to it in double.
void add_block_f16_simd_order(float* out, const char* b, size_t stride, const float* w, float scale,
                              int64_t rank) {
  const int64_t np = rank & ~int64_t(63);
  const __m512 sum = simd_order_sum(b, stride, w, np, [](const char* row) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row)));
  });
  __m512d acc[2] = {_mm512_cvtps_pd(_mm512_castps512_ps256(sum)),
                    _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sum), 1)))};
  for (int64_t k = np; k < rank; ++k) {
    const char* row = b + size_t(k) * stride;
    const __m512d wk = _mm512_set1_pd(double(w[k]));
    for (int h = 0; h < 2; ++h) acc[h] = _mm512_fmadd_pd(wk, load8(GGML_TYPE_F16, row + 16 * h), acc[h]);
  }
  const __m256 s = _mm256_set1_ps(scale);
  for (int h = 0; h < 2; ++h) {
    float* o = out + 8 * h;
    _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), _mm256_mul_ps(_mm512_cvtpd_ps(acc[h]), s)));
  }
}

// The same for F32 rows, as ggml's F32 dot product sums it: simd_order_sum,
// then the last rank % 64 products by tail_fused_dot's rule (in float, the
// last of them fused).
void add_block_f32_simd_order(float* out, const char* b, size_t stride, const float* w, float scale,
                              int64_t rank, int64_t width) {
  const int64_t np = rank & ~int64_t(63);
  __m512 sum = simd_order_sum(
      b, stride, w, np, [](const char* row) { return _mm512_loadu_ps(reinterpret_cast<const float*>(row)); });
  const int64_t fused_from = np + ((rank - np) & ~(width - 1));
  for (int64_t k = np; k < rank; ++k) {
    const __m512 bk = _mm512_loadu_ps(reinterpret_cast<const float*>(b + size_t(k) * stride));
    const __m512 wk = _mm512_set1_ps(w[k]);
    sum = k < fused_from ? _mm512_add_ps(sum, _mm512_mul_ps(wk, bk)) : _mm512_fmadd_ps(wk, bk, sum);
  }
  _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(out), _mm512_mul_ps(sum, _mm512_set1_ps(scale))));
}

// Blocks of 16 outputs in ggml's vector order (F16 or F32 rows), the last
// n % 16 through ggml's own dot product.
void add_rows_simd_order(float* out, const char* b, size_t stride, ggml_type type, const float* w,
                         float scale, int64_t rank, int64_t n) {
  const size_t es = ggml_type_size(type);
  int64_t o0 = 0;
  for (; o0 + 16 <= n; o0 += 16) {
    if (type == GGML_TYPE_F16) {
      add_block_f16_simd_order(out + o0, b + size_t(o0) * es, stride, w, scale, rank);
    } else {
      add_block_f32_simd_order(out + o0, b + size_t(o0) * es, stride, w, scale, rank, f32_tail_width());
    }
  }
  if (o0 < n) add_rows_ggml_dot(out + o0, b + size_t(o0) * es, stride, type, w, scale, rank, n - o0);
}

// Whether add_rows_simd_order gives add_rows_ggml_dot's results (ggml's own
// dot product) to the bit for F16 or F32 rows in this binary, found once per
// type on random rows of several ranks: it does where ggml was built for
// AVX-512 (without AVX-512 FP16) by the compiler graft was.
bool simd_order_matches(ggml_type type) {
  auto check = [](ggml_type t) {
    probe_traits(t);
    if (t == GGML_TYPE_F32 && f32_tail_width() == 0) return false;
    constexpr int64_t kOut = 40;  // two blocks of 16 and a tail
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (int64_t rank : {64, 80, 128, 191}) {
      std::vector<float> values(static_cast<size_t>(rank * kOut));
      for (float& v : values) v = uniform(rng);
      std::vector<char> b(static_cast<size_t>(rank * kOut) * ggml_type_size(t));
      if (t == GGML_TYPE_F16) {
        ggml_cpu_fp32_to_fp16(values.data(), reinterpret_cast<ggml_fp16_t*>(b.data()), rank * kOut);
      } else {
        std::memcpy(b.data(), values.data(), b.size());
      }
      std::vector<float> w(static_cast<size_t>(rank));
      for (float& v : w) v = round_input(t, uniform(rng));
      std::vector<float> want(kOut, 0.5f), got(kOut, 0.5f);
      const size_t stride = kOut * ggml_type_size(t);
      add_rows_ggml_dot(want.data(), b.data(), stride, t, w.data(), 0.75f, rank, kOut);
      add_rows_simd_order(got.data(), b.data(), stride, t, w.data(), 0.75f, rank, kOut);
      if (std::memcmp(want.data(), got.data(), sizeof(float) * kOut) != 0) return false;
    }
    return true;
  };
  static const bool f16 = check(GGML_TYPE_F16);
  static const bool f32 = check(GGML_TYPE_F32);
  return type == GGML_TYPE_F16 ? f16 : type == GGML_TYPE_F32 ? f32 : false;
}
#endif

int type_index(ggml_type type) {
  for (int t = 0; t < kLoraTypeCount; ++t) {
    if (ggml_type_of(LoraType(t)) == type) return t;
  }
  return -1;
}

template <typename T>
const T& at(const ggml_tensor* t, int64_t i0, int64_t i1, int64_t i2) {
  return *reinterpret_cast<const T*>(static_cast<const char*>(t->data) + i0 * t->nb[0] + i1 * t->nb[1] +
                                     i2 * t->nb[2]);
}

// B's term of one route entry over outputs [o0, o0 + n) of a row: out +=
// scale * B_slot w, w = A x rounded as ggml rounds a matmul's input for B's
// type. B's slot is read block by block (lora_b_index), each block's rows of
// kLoraBBlock outputs one after the other, so the term reads one run of
// memory from start to end.
void add_b_term(float* out, const ggml_tensor* b, int32_t slot, int64_t o0, const float* ax, float* w,
                float scale, int64_t n) {
  int64_t rank = b->ne[0] / kLoraBBlock;
  for (int64_t k = 0; k < rank; ++k) w[k] = round_input(b->type, ax[k]);
  // The stacks pad an adapter's rank with zeros: its own rank, the length of
  // the dot products ggml sums, ends at the last nonzero w (should A x be
  // exactly 0 there, the rank ggml's split sees may move: a last-bit
  // difference at most, in a case that needs exact cancellation). Every
  // kernel below takes that rank.
  while (rank > 0 && w[rank - 1] == 0.0f) --rank;
  const size_t es = ggml_type_size(b->type);
  const size_t stride = size_t(kLoraBBlock) * es;  // between rows within a block
  const char* slot_data = static_cast<const char*>(b->data) + size_t(slot) * b->nb[2];
  for (int64_t o = o0; o < o0 + n;) {
    const int64_t block = o / kLoraBBlock;
    const int64_t m = std::min(o0 + n, (block + 1) * kLoraBBlock) - o;
    const char* base = slot_data + size_t(block) * b->nb[1] + size_t(o % kLoraBBlock) * es;
    float* dst = out + (o - o0);
    if (b->type == GGML_TYPE_F32 && rank < f32_in_order_below()) {
      add_rows_f32(dst, base, stride, w, scale, rank, m, f32_tail_width());
    } else if (b->type != GGML_TYPE_F32 && rank < in_order_below(b->type)) {
#if defined(__AVX512F__)
      add_rows_exact_avx512(dst, base, stride, b->type, w, scale, rank, m, b->nb[1]);
#else
      add_rows_exact(dst, base, stride, b->type, w, scale, rank, m);
#endif
#if defined(__AVX512F__)
    } else if (simd_order_matches(b->type)) {
      add_rows_simd_order(dst, base, stride, b->type, w, scale, rank, m);
#endif
    } else {
      add_rows_ggml_dot(dst, base, stride, b->type, w, scale, rank, m);
    }
    o += m;
  }
}

// A x for one row and slot, as ggml_mul_mat_id computes it: the row turned
// into the dot product's input type (xq, converted once per row and type by
// the caller), then one ggml dot product per row of A.
void a_products(const ggml_tensor* a, int32_t slot, const void* xq, float* ax) {
  const ggml_type_traits_cpu* traits = ggml_get_type_traits_cpu(a->type);
  const char* rows = static_cast<const char*>(a->data) + size_t(slot) * a->nb[2];
  for (int64_t k = 0; k < a->ne[1]; ++k)
    traits->vec_dot(int(a->ne[0]), &ax[k], 0, rows + k * a->nb[1], 0, xq, 0, 1);
}

// src: y, x, routes, then (a_stack, b_stack) per group. The rows'
// work is dealt out evenly: each row in `parts` slices of its outputs, where
// rows * parts is a multiple of the threads (8 rows on 2 threads: whole rows,
// each thread reading its rows' adapters alone; 1 row: one slice each, every
// thread computing the row's A products for itself).
void lora_add_kernel(ggml_tensor* dst, int ith, int nth, void*) {
  const ggml_tensor* y = dst->src[0];
  const ggml_tensor* x = dst->src[1];
  const ggml_tensor* routes = dst->src[2];
  std::array<int, kLoraTypeCount> group_of{};  // per type: its group's first src, or 0
  int64_t max_rank = 0;
  for (int s = 3; s + 1 < GGML_MAX_SRC && dst->src[s]; s += 2) {
    group_of[size_t(type_index(dst->src[s + 1]->type))] = s;
    max_rank = std::max(max_rank, dst->src[s]->ne[1]);
  }
  const int64_t n_out = y->ne[0];
  const int64_t n_in = x->ne[0];
  const int64_t n_used = routes->ne[0];
  const int64_t n_rows = routes->ne[1];
  const int64_t parts = nth / std::gcd(n_rows, int64_t(nth));
  const int64_t units = n_rows * parts;
  const int64_t u0 = units * ith / nth;
  const int64_t u1 = units * (ith + 1) / nth;
  // Slices of whole cache lines (16 floats).
  const int64_t step = ((n_out + parts - 1) / parts + 15) / 16 * 16;
  std::vector<float> ax(static_cast<size_t>(max_rank)), w(static_cast<size_t>(max_rank));
  // The row in each dot product input type (F32 rows are used as they are).
  std::array<std::vector<char>, kLoraTypeCount> xq;
  for (int64_t r = u0 / parts; r * parts < u1; ++r) {
    const int64_t o0 = std::min(n_out, (std::max(u0, r * parts) - r * parts) * step);
    const int64_t o1 = std::min(n_out, (std::min(u1, (r + 1) * parts) - r * parts) * step);
    if (o0 >= o1) continue;
    float* out = reinterpret_cast<float*>(static_cast<char*>(dst->data) + r * dst->nb[1]) + o0;
    std::copy_n(&at<float>(y, o0, r, 0), o1 - o0, out);
    const float* x_row = &at<float>(x, 0, r, 0);
    std::array<bool, kLoraTypeCount> converted{};
    for (int64_t u = 0; u < n_used; ++u) {
      float scale;  // an F32 in the I32 plane's bits
      std::memcpy(&scale, &at<int32_t>(routes, u, r, kLoraRoutePlanes - 1), sizeof(scale));
      if (scale == 0.0f) continue;  // a padding entry: no adapter
      const int32_t type = at<int32_t>(routes, u, r, 0);
      const int g = type >= 0 && type < kLoraTypeCount ? group_of[size_t(type)] : 0;
      if (g == 0) continue;  // no adapter of that type touches this projection
      const ggml_tensor* a = dst->src[g];
      const int32_t slot = at<int32_t>(routes, u, r, 1 + type);
      const ggml_type input_type = ggml_get_type_traits_cpu(a->type)->vec_dot_type;
      const void* xq_row = x_row;
      if (input_type != GGML_TYPE_F32) {
        std::vector<char>& buf = xq[size_t(type)];
        if (!converted[size_t(type)]) {
          buf.resize(ggml_row_size(input_type, n_in));
          ggml_get_type_traits_cpu(input_type)->from_float(x_row, buf.data(), n_in);
          converted[size_t(type)] = true;
        }
        xq_row = buf.data();
      }
      a_products(a, slot, xq_row, ax.data());
      add_b_term(out, dst->src[g + 1], slot, o0, ax.data(), w.data(), scale, o1 - o0);
    }
  }
}

}  // namespace

ggml_tensor* new_lora_b_stack(ggml_context* ctx, ggml_type type, int64_t n_out, int64_t rank,
                              int64_t n_slots) {
  return ggml_new_tensor_3d(ctx, type, kLoraBBlock * rank, lora_b_blocks(n_out), n_slots);
}

LoraKernels lora_kernels() {
  LoraKernels k;
  k.f16_in_order_below = in_order_below(GGML_TYPE_F16);
  k.bf16_in_order_below = in_order_below(GGML_TYPE_BF16);
#if defined(__AVX512F__)
  k.avx512 = true;
  k.f16_simd_order = simd_order_matches(GGML_TYPE_F16);
  k.f32_simd_order = simd_order_matches(GGML_TYPE_F32);
#endif
  k.f32_tail_width = f32_tail_width();
  k.f32_in_order_below = f32_in_order_below();
  return k;
}

ggml_tensor* lora_add(ggml_context* ctx, ggml_tensor* y, ggml_tensor* x, ggml_tensor* routes,
                      std::span<const LoraSet::Stack> groups) {
  GGML_ASSERT(y->type == GGML_TYPE_F32 && y->nb[0] == sizeof(float));
  GGML_ASSERT(x->type == GGML_TYPE_F32 && x->nb[0] == sizeof(float) && x->ne[1] == y->ne[1]);
  GGML_ASSERT(routes->type == GGML_TYPE_I32 && routes->ne[1] == y->ne[1] &&
              routes->ne[2] == kLoraRoutePlanes);
  GGML_ASSERT(!groups.empty() && groups.size() <= size_t(kLoraTypeCount));
  ggml_tensor* args[3 + 2 * kLoraTypeCount] = {y, x, routes};
  std::array<bool, kLoraTypeCount> seen{};
  int n_args = 3;
  for (const LoraSet::Stack& g : groups) {
    const int t = type_index(g.b->type);
    GGML_ASSERT(t >= 0 && !seen[size_t(t)] && g.a->type == g.b->type);
    seen[size_t(t)] = true;
    GGML_ASSERT(g.b->ne[1] == lora_b_blocks(y->ne[0]) && g.a->ne[0] == x->ne[0]);
    GGML_ASSERT(g.b->ne[0] == kLoraBBlock * g.a->ne[1] && g.a->ne[2] == g.b->ne[2]);
    args[n_args++] = g.a;
    args[n_args++] = g.b;
  }
  static_assert(3 + 2 * kLoraTypeCount < GGML_MAX_SRC);  // ggml_custom_4d's limit
  return ggml_custom_4d(ctx, GGML_TYPE_F32, y->ne[0], y->ne[1], 1, 1, args, n_args, lora_add_kernel,
                        GGML_N_TASKS_MAX, nullptr);
}

}  // namespace graft

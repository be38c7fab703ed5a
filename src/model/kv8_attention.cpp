#include "model/kv8_attention.h"

#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "model/q4_rows.h"

namespace graft {

namespace {

#define GRAFT_VNNI512VL __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))

constexpr int kBlock = 32;  // Q8_0

// A Q8_0 block as ggml stores it.
struct Q8Block {
  uint16_t d;
  int8_t qs[kBlock];
};
static_assert(sizeof(Q8Block) == 34);

// The op's scale, carried in its userdata pointer's bits.
void* scale_bits(float scale) {
  return reinterpret_cast<void*>(uintptr_t(std::bit_cast<uint32_t>(scale)));
}
float scale_of(const void* userdata) {
  return std::bit_cast<float>(uint32_t(reinterpret_cast<uintptr_t>(userdata)));
}

// The 8 lanes added as ggml's hsum_float_8 adds them.
GRAFT_VNNI512VL inline float sum_lanes(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

// One query row's head_dim values quantized as ggml's quantize_row_q8_0
// quantizes them: per block, d = the largest magnitude / 127 (kept as F16),
// q = the value times 127 / that magnitude, rounded to nearest even.
template <int D>
GRAFT_VNNI512VL inline void quantize_query(const float* x, int8_t* q, float* d) {
  for (int b = 0; b < D / kBlock; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + kBlock * b);
    const __m512 v1 = _mm512_loadu_ps(x + kBlock * b + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    d[b] = _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
    const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + kBlock * b),
                     _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, id))));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + kBlock * b + 16),
                     _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, id))));
  }
}

// Rows x heads [i0, i1) of the op (index r * n_head + h).
template <int D>
GRAFT_VNNI512VL void attend(ggml_tensor* dst, float scale, int64_t i0, int64_t i1) {
  const ggml_tensor* q = dst->src[0];
  const ggml_tensor* k = dst->src[1];
  const ggml_tensor* v = dst->src[2];
  const ggml_tensor* mask = dst->src[3];
  const int64_t n_head = q->ne[1];
  const int64_t group = n_head / k->ne[1];
  const int64_t n_cells = k->ne[2];
  constexpr int kBlocks = D / kBlock;
  constexpr int kVecs = D / 16;
  alignas(64) int8_t qq[D];
  float qd[kBlocks];
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t r = i / n_head;
    const int64_t h = i % n_head;
    const int64_t hk = h / group;
    quantize_query<D>(
        reinterpret_cast<const float*>(static_cast<const char*>(q->data) + r * q->nb[2] + h * q->nb[1]), qq,
        qd);
    const auto* mp =
        reinterpret_cast<const ggml_fp16_t*>(static_cast<const char*>(mask->data) + r * mask->nb[1]);
    const char* k_head = static_cast<const char*>(k->data) + hk * k->nb[1];
    const char* v_head = static_cast<const char*>(v->data) + hk * v->nb[1];
    __m512 acc[kVecs];
    for (int j = 0; j < kVecs; ++j) acc[j] = _mm512_setzero_ps();
    float sum = 0.0f;
    float max = -INFINITY;
    for (int64_t c = 0; c < n_cells; ++c) {
      const float mv = _cvtsh_ss(mp[c]);
      if (mv == -INFINITY) continue;
      // The key product, as ggml_vec_dot_q8_0_q8_0 sums it.
      const auto* kb = reinterpret_cast<const Q8Block*>(k_head + c * k->nb[2]);
      __m256 dot = _mm256_setzero_ps();
      for (int b = 0; b < kBlocks; ++b) {
        const __m256i kx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kb[b].qs));
        const __m256i qy = _mm256_load_si256(reinterpret_cast<const __m256i*>(qq + kBlock * b));
        const __m256i sums =
            _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(kx, kx), _mm256_sign_epi8(qy, kx));
        dot = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(kb[b].d) * qd[b]), _mm256_cvtepi32_ps(sums), dot);
      }
      float s = sum_lanes(dot);
      s = s * scale;
      s += mv;
      // The running maximum, sum and values, as ggml updates them.
      float ms = 1.0f;
      float vs = 1.0f;
      if (s > max) {
        ms = expf(max - s);
        max = s;
        const __m512 m = _mm512_set1_ps(ms);
        for (int j = 0; j < kVecs; ++j) acc[j] = _mm512_mul_ps(acc[j], m);
      } else {
        vs = expf(s - max);
      }
      const auto* vb = reinterpret_cast<const Q8Block*>(v_head + c * v->nb[2]);
      const __m512 w = _mm512_set1_ps(vs);
      for (int j = 0; j < kVecs; ++j) {
        const Q8Block& blk = vb[j / 2];
        const __m512 vals = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                              reinterpret_cast<const __m128i*>(blk.qs + 16 * (j % 2))))),
                                          _mm512_set1_ps(_cvtsh_ss(blk.d)));
        acc[j] = _mm512_fmadd_ps(vals, w, acc[j]);
      }
      sum = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(sum), _mm_set_ss(ms), _mm_set_ss(vs)));
    }
    const __m512 inv = _mm512_set1_ps(sum == 0.0f ? 0.0f : 1.0f / sum);
    float* out = reinterpret_cast<float*>(static_cast<char*>(dst->data) + r * dst->nb[2] + h * dst->nb[1]);
    for (int j = 0; j < kVecs; ++j) _mm512_storeu_ps(out + 16 * j, _mm512_mul_ps(acc[j], inv));
  }
}

// Each thread a share of the (row, head) pairs.
void kv8_attention_kernel(ggml_tensor* dst, int ith, int nth, void* userdata) {
  const float scale = scale_of(userdata);
  const int64_t total = dst->ne[1] * dst->ne[2];
  const int64_t i0 = total * ith / nth;
  const int64_t i1 = total * (ith + 1) / nth;
  switch (dst->ne[0]) {
    case 64:
      attend<64>(dst, scale, i0, i1);
      break;
    case 128:
      attend<128>(dst, scale, i0, i1);
      break;
    default:
      attend<256>(dst, scale, i0, i1);
      break;
  }
}

bool q8_cache_view(const ggml_tensor* t) {
  const int64_t d = t->ne[0];
  return t->type == GGML_TYPE_Q8_0 && (d == 64 || d == 128 || d == 256) && t->ne[3] == 1 &&
         t->nb[0] == sizeof(Q8Block) && t->nb[1] >= ggml_row_size(t->type, d) && t->nb[1] % 2 == 0;
}

}  // namespace

bool kv8_attention_supported(const ggml_tensor* k, const ggml_tensor* v) {
  return q4_rows_cpu() && q8_cache_view(k) && q8_cache_view(v) && k->ne[0] == v->ne[0] &&
         k->ne[1] == v->ne[1] && k->ne[2] == v->ne[2];
}

ggml_tensor* kv8_attention(ggml_context* ctx, ggml_tensor* q, ggml_tensor* k, ggml_tensor* v,
                           ggml_tensor* mask, float scale) {
  GGML_ASSERT(kv8_attention_supported(k, v));
  GGML_ASSERT(q->type == GGML_TYPE_F32 && q->ne[0] == k->ne[0] && q->nb[0] == sizeof(float) && q->ne[3] == 1);
  GGML_ASSERT(q->ne[1] % k->ne[1] == 0);
  GGML_ASSERT(mask && mask->type == GGML_TYPE_F16 && mask->ne[0] == k->ne[2] && mask->ne[1] >= q->ne[2]);
  ggml_tensor* args[] = {q, k, v, mask};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, q->ne[0], q->ne[1], q->ne[2], 1, args, 4, kv8_attention_kernel,
                        GGML_N_TASKS_MAX, scale_bits(scale));
}

}  // namespace graft

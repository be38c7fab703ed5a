#include "model/delta_net.h"

#include <cmath>
#include <cstdint>
#include <initializer_list>

#include <ggml-cpu.h>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace graft {

namespace {

// This file is built without floating-point contraction: (v - dot) * beta and
// dot * scale round as ggml's scalar code rounds them; the fused multiply-add
// of the write is explicit.

#if defined(__AVX512F__)
constexpr int64_t kLanes = 16;
using Vec = __m512;
inline Vec load(const float* p) {
  return _mm512_loadu_ps(p);
}
inline void store(float* p, Vec v) {
  _mm512_storeu_ps(p, v);
}
inline Vec splat(float x) {
  return _mm512_set1_ps(x);
}
inline Vec mul(Vec a, Vec b) {
  return _mm512_mul_ps(a, b);
}
inline Vec fmadd(Vec a, Vec b, Vec c) {
  return _mm512_fmadd_ps(a, b, c);
}
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int64_t kLanes = 8;
using Vec = __m256;
inline Vec load(const float* p) {
  return _mm256_loadu_ps(p);
}
inline void store(float* p, Vec v) {
  _mm256_storeu_ps(p, v);
}
inline Vec splat(float x) {
  return _mm256_set1_ps(x);
}
inline Vec mul(Vec a, Vec b) {
  return _mm256_mul_ps(a, b);
}
inline Vec fmadd(Vec a, Vec b, Vec c) {
  return _mm256_fmadd_ps(a, b, c);
}
#else
constexpr int64_t kLanes = 0;
#endif

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))

// Whether a row of n floats suits the kernel: whole vectors.
bool fits(int64_t n) {
  return n % kLanes == 0;
}

// row *= e, elementwise (as ggml_vec_scale_f32 over the state).
inline void scale_row(float* row, int64_t n, Vec e) {
  for (int64_t i = 0; i < n; i += kLanes) store(row + i, mul(load(row + i), e));
}

// row += x * d, fused per element (as ggml_vec_mad_f32).
inline void mad_row(float* row, const float* x, int64_t n, Vec d) {
  for (int64_t i = 0; i < n; i += kLanes) store(row + i, fmadd(load(x + i), d, load(row + i)));
}

struct Args {
  const ggml_tensor* q;
  const ggml_tensor* k;
  const ggml_tensor* v;
  const ggml_tensor* g;
  const ggml_tensor* beta;
  ggml_tensor* states;
  const ggml_tensor* slots;
};

const float* row_at(const ggml_tensor* t, int64_t i1, int64_t i2, int64_t i3) {
  return reinterpret_cast<const float*>(static_cast<const char*>(t->data) + i1 * t->nb[1] + i2 * t->nb[2] +
                                        i3 * t->nb[3]);
}

// Each thread takes every nth (head, sequence) pair; each pair runs its
// tokens in order on its own state, which no other pair touches.
void delta_net_kernel(ggml_tensor* dst, int ith, int nth, void*) {
  const Args a{dst->src[0], dst->src[1], dst->src[2], dst->src[3], dst->src[4], dst->src[5], dst->src[6]};
  const int64_t hd = a.v->ne[0], n_heads = a.v->ne[1], n_tokens = a.v->ne[2], n_seqs = a.v->ne[3];
  const int64_t n_k_heads = a.q->ne[1];
  const float scale = 1.0f / std::sqrt(float(hd));
  const auto dot = ggml_get_type_traits_cpu(GGML_TYPE_F32)->vec_dot;
  const auto* slots = static_cast<const int32_t*>(a.slots->data);
  for (int64_t pair = ith; pair < n_heads * n_seqs; pair += nth) {
    const int64_t h = pair % n_heads, s = pair / n_heads;
    float* state = reinterpret_cast<float*>(static_cast<char*>(a.states->data) + slots[s] * a.states->nb[1]) +
                   h * hd * hd;
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* q = row_at(a.q, h % n_k_heads, t, s);
      const float* k = row_at(a.k, h % n_k_heads, t, s);
      const float* v = row_at(a.v, h, t, s);
      const float g = *row_at(a.g, h, t, s);
      const float beta = *row_at(a.beta, h, t, s);
      float* out = reinterpret_cast<float*>(static_cast<char*>(dst->data) + h * dst->nb[1] + t * dst->nb[2] +
                                            s * dst->nb[3]);
      const Vec decay = splat(std::exp(g));
      // Row j of the stored state is column j of S: decay it, read it at k,
      // write the delta, read it at q, while it is in L1.
      for (int64_t j = 0; j < hd; ++j) {
        float* row = state + j * hd;
        scale_row(row, hd, decay);
        float sum = 0.0f;
        dot(int(hd), &sum, 0, row, 0, k, 0, 1);
        const float delta = (v[j] - sum) * beta;
        mad_row(row, k, hd, splat(delta));
        sum = 0.0f;
        dot(int(hd), &sum, 0, row, 0, q, 0, 1);
        out[j] = sum * scale;
      }
    }
  }
}

#else

bool fits(int64_t) {
  return false;
}

void delta_net_kernel(ggml_tensor*, int, int, void*) {
  GGML_ABORT("delta_net_update is not built for this CPU");
}

#endif

}  // namespace

bool delta_net_update_supported(int64_t head_dim) {
  return fits(head_dim);
}

ggml_tensor* delta_net_update(ggml_context* ctx, ggml_tensor* q, ggml_tensor* k, ggml_tensor* v,
                              ggml_tensor* g, ggml_tensor* beta, ggml_tensor* states, ggml_tensor* slots) {
  const int64_t hd = v->ne[0], n_heads = v->ne[1], n_tokens = v->ne[2], n_seqs = v->ne[3];
  GGML_ASSERT(delta_net_update_supported(hd));
  for (const ggml_tensor* t : {q, k, v, g, beta, states}) {
    GGML_ASSERT(t->type == GGML_TYPE_F32 && t->nb[0] == sizeof(float));
  }
  GGML_ASSERT(q->ne[0] == hd && k->ne[0] == hd && q->ne[1] == k->ne[1] && n_heads % q->ne[1] == 0);
  GGML_ASSERT(q->ne[2] == n_tokens && k->ne[2] == n_tokens && q->ne[3] == n_seqs && k->ne[3] == n_seqs);
  for (const ggml_tensor* t : {g, beta}) {
    GGML_ASSERT(t->ne[0] == 1 && t->ne[1] == n_heads && t->ne[2] == n_tokens && t->ne[3] == n_seqs);
  }
  GGML_ASSERT(states->ne[0] == hd * hd * n_heads && ggml_is_contiguous(states));
  GGML_ASSERT(slots->type == GGML_TYPE_I32 && slots->ne[0] == n_seqs);
  ggml_tensor* args[] = {q, k, v, g, beta, states, slots};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, hd, n_heads, n_tokens, n_seqs, args, 7, delta_net_kernel,
                        GGML_N_TASKS_MAX, nullptr);
}

}  // namespace graft

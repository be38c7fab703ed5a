#include "model/delta_net.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include <ggml-cpu.h>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace graft {

namespace {

constexpr int64_t kConvMaxTaps = 8;
constexpr int64_t kConvBlock = 64;

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

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)

// ggml_vec_dot_f32 on AVX2 sums 32 floats a step in four accumulators of 8
// lanes (a fused multiply-add each), then reduces them as this does.
constexpr int64_t kDotStep = 32;

inline float reduce_dot(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  a0 = _mm256_add_ps(a0, a2);
  a1 = _mm256_add_ps(a1, a3);
  a0 = _mm256_add_ps(a0, a1);
  const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
  const __m128 t1 = _mm_hadd_ps(t0, t0);
  return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

// One token on kRows rows of one head's state (rows j..j+kRows-1, each a
// column of S), the same operations per row as the loop in delta_net_kernel
// with ggml's dot product written out, but the rows interleaved: each row's
// step is a chain of dependent sums (decay and read at k, then the write and
// the read at q), and kRows independent chains keep the FMA units busy where
// one row at a time waits on each chain's latency.
template <int kRows>
inline void step_rows(float* rows, int64_t hd, const float* k, const float* q, const float* v, float beta,
                      __m256 decay, float scale, float* out) {
  __m256 acc[kRows][4];
  for (auto& a : acc)
    for (__m256& x : a) x = _mm256_setzero_ps();
  for (int64_t i = 0; i < hd; i += kDotStep) {
    for (int c = 0; c < 4; ++c) {
      const __m256 kv = _mm256_loadu_ps(k + i + 8 * c);
      for (int r = 0; r < kRows; ++r) {
        float* p = rows + r * hd + i + 8 * c;
        const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(p), decay);
        _mm256_storeu_ps(p, x);
        acc[r][c] = _mm256_fmadd_ps(x, kv, acc[r][c]);
      }
    }
  }
  __m256 delta[kRows];
  for (int r = 0; r < kRows; ++r) {
    const float sum = reduce_dot(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    delta[r] = _mm256_set1_ps((v[r] - sum) * beta);
    for (__m256& x : acc[r]) x = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < hd; i += kDotStep) {
    for (int c = 0; c < 4; ++c) {
      const __m256 kv = _mm256_loadu_ps(k + i + 8 * c);
      const __m256 qv = _mm256_loadu_ps(q + i + 8 * c);
      for (int r = 0; r < kRows; ++r) {
        float* p = rows + r * hd + i + 8 * c;
        const __m256 x = _mm256_fmadd_ps(kv, delta[r], _mm256_loadu_ps(p));
        _mm256_storeu_ps(p, x);
        acc[r][c] = _mm256_fmadd_ps(x, qv, acc[r][c]);
      }
    }
  }
  for (int r = 0; r < kRows; ++r) out[r] = reduce_dot(acc[r][0], acc[r][1], acc[r][2], acc[r][3]) * scale;
}

constexpr int kInterleave = 2;     // rows a step interleaves (4 sums each; 4 rows spill registers)
constexpr int64_t kRowBlock = 16;  // rows a chunk of tokens runs on (8 KiB of a 128-wide state)
constexpr int64_t kTokenChunk = 64;

bool interleaves(int64_t hd) {
  return hd % kDotStep == 0 && hd % kRowBlock == 0;
}

#else

constexpr int kInterleave = 1;
constexpr int64_t kRowBlock = 1;
constexpr int64_t kTokenChunk = 1;

bool interleaves(int64_t) {
  return false;
}

template <int kRows>
inline void step_rows(float*, int64_t, const float*, const float*, const float*, float, Vec, float, float*) {}

#endif

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
    auto token = [&](int64_t t, const float*& q, const float*& k, const float*& v, float& g, float& beta,
                     float*& out) {
      q = row_at(a.q, h % n_k_heads, t, s);
      k = row_at(a.k, h % n_k_heads, t, s);
      v = row_at(a.v, h, t, s);
      g = *row_at(a.g, h, t, s);
      beta = *row_at(a.beta, h, t, s);
      out = reinterpret_cast<float*>(static_cast<char*>(dst->data) + h * dst->nb[1] + t * dst->nb[2] +
                                     s * dst->nb[3]);
    };
    const float *q, *k, *v;
    float g, beta, *out;
    if (interleaves(hd)) {
      // Rows never mix: each row of the state sees every token in order and
      // nothing of the other rows. So a block of rows (in L1) takes a chunk
      // of tokens (their q and k in L2) before the next block, where a token
      // at a time over the whole state (64 KiB a head for Qwen3.5) would
      // stream it through L2 once a token.
      for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokenChunk) {
        const int64_t t1 = std::min(n_tokens, t0 + kTokenChunk);
        for (int64_t jb = 0; jb < hd; jb += kRowBlock) {
          for (int64_t t = t0; t < t1; ++t) {
            token(t, q, k, v, g, beta, out);
            const Vec decay = splat(std::exp(g));
            for (int64_t j = jb; j < jb + kRowBlock; j += kInterleave)
              step_rows<kInterleave>(state + j * hd, hd, k, q, v + j, beta, decay, scale, out + j);
          }
        }
      }
      continue;
    }
    for (int64_t t = 0; t < n_tokens; ++t) {
      token(t, q, k, v, g, beta, out);
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

// How ggml's ssm_conv sums a window of 4 taps in this build of ggml. The C
// loop is the same everywhere; the compiler decides: GCC's AVX2 code rounds
// each product before its add, its AVX-512 code fuses them. Found once by
// running the op on random values, where the two differ; `unknown` when
// neither matches every channel (conv_update then stays unused and the graph
// keeps ggml's ops).
enum class ConvSum { rounded, fused, unknown };

ConvSum ggml_conv_sum() {
  static const ConvSum sum = [] {
    constexpr int64_t nc = 4, n_ch = 256;
    ggml_init_params params{};
    params.mem_size = size_t(1) << 20;
    ggml_context* ctx = ggml_init(params);
    ggml_tensor* in = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, nc, n_ch, 1);  // one token after 3 of state
    ggml_tensor* w = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, nc, n_ch);
    uint32_t seed = 12345;
    for (ggml_tensor* t : {in, w}) {
      auto* v = static_cast<float*>(t->data);
      for (int64_t i = 0; i < ggml_nelements(t); ++i) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = float(seed >> 8) / float(1u << 22) - 2.0f;
      }
    }
    ggml_tensor* out = ggml_ssm_conv(ctx, in, w);
    ggml_cgraph* graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, out);
    ConvSum found = ConvSum::unknown;
    if (ggml_graph_compute_with_ctx(ctx, graph, 1) == GGML_STATUS_SUCCESS) {
      const auto* x = static_cast<const float*>(in->data);
      const auto* c = static_cast<const float*>(w->data);
      const auto* y = static_cast<const float*>(out->data);
      int64_t rounded = 0, fused = 0;
      for (int64_t ch = 0; ch < n_ch; ++ch) {
        float r = 0.0f, f = 0.0f;
        for (int64_t i = 0; i < nc; ++i) {
          const float product = x[ch * nc + i] * c[ch * nc + i];
          r += product;
          f = std::fma(x[ch * nc + i], c[ch * nc + i], f);
        }
        rounded += r == y[ch];
        fused += f == y[ch];
      }
      found = rounded == n_ch ? ConvSum::rounded : fused == n_ch ? ConvSum::fused : ConvSum::unknown;
    }
    ggml_free(ctx);
    return found;
  }();
  return sum;
}

// The short convolution: each thread takes a range of channels (whole
// vectors) of every sequence, so reading a channel's state and writing its
// new one stay in one thread.
void conv_kernel(ggml_tensor* dst, int ith, int nth, void*) {
  const ggml_tensor* x = dst->src[0];
  ggml_tensor* states = dst->src[1];
  const ggml_tensor* w = dst->src[2];
  const auto* slots = static_cast<const int32_t*>(dst->src[3]->data);
  const int64_t nc = w->ne[0], taps = nc - 1, n_ch = x->ne[0], n_t = x->ne[1], n_s = x->ne[2];
  const int64_t per = ((n_ch + nth - 1) / nth + 7) / 8 * 8;
  const int64_t c_begin = std::min(n_ch, per * ith), c_end = std::min(n_ch, c_begin + per);
  const auto* weights = static_cast<const float*>(w->data);
  const bool fused = ggml_conv_sum() == ConvSum::fused;
  float hist[kConvMaxTaps][kConvBlock], wt[kConvMaxTaps][kConvBlock], sums[kConvBlock];
  for (int64_t s = 0; s < n_s; ++s) {
    float* state = reinterpret_cast<float*>(static_cast<char*>(states->data) + slots[s] * states->nb[1]);
    for (int64_t cb = c_begin; cb < c_end; cb += kConvBlock) {
      const int64_t m = std::min(kConvBlock, c_end - cb);
      for (int64_t c = 0; c < m; ++c) {
        for (int64_t i = 0; i < nc; ++i) wt[i][c] = weights[(cb + c) * nc + i];
        for (int64_t i = 0; i < taps; ++i) hist[i][c] = state[(cb + c) * taps + i];
      }
      // Window position p: the state's inputs first, then the tokens'.
      auto at = [&](int64_t p) -> const float* {
        return p < taps ? hist[p]
                        : reinterpret_cast<const float*>(static_cast<const char*>(x->data) +
                                                         (p - taps) * x->nb[1] + s * x->nb[2]) +
                              cb;
      };
      for (int64_t t = 0; t < n_t; ++t) {
        for (int64_t c = 0; c < m; ++c) sums[c] = 0.0f;
        for (int64_t i = 0; i < nc; ++i) {
          const float* in = at(t + i);
          if (fused) {
            for (int64_t c = 0; c < m; ++c) sums[c] = std::fma(in[c], wt[i][c], sums[c]);
          } else {
            for (int64_t c = 0; c < m; ++c) sums[c] += in[c] * wt[i][c];
          }
        }
        float* out =
            reinterpret_cast<float*>(static_cast<char*>(dst->data) + t * dst->nb[1] + s * dst->nb[2]) + cb;
        for (int64_t c = 0; c < m; ++c) out[c] = sums[c];
      }
      for (int64_t i = 0; i < taps; ++i) {
        const float* in = at(n_t + i);
        for (int64_t c = 0; c < m; ++c) state[(cb + c) * taps + i] = in[c];
      }
    }
  }
}

}  // namespace

bool conv_update_supported(int64_t taps) {
  return taps == 4 && ggml_conv_sum() != ConvSum::unknown;
}

ggml_tensor* conv_update(ggml_context* ctx, ggml_tensor* x, ggml_tensor* states, ggml_tensor* weights,
                         ggml_tensor* slots) {
  const int64_t n_ch = x->ne[0], n_t = x->ne[1], n_s = x->ne[2], nc = weights->ne[0];
  GGML_ASSERT(x->type == GGML_TYPE_F32 && x->nb[0] == sizeof(float) && x->ne[3] == 1);
  GGML_ASSERT(conv_update_supported(nc) && nc <= kConvMaxTaps && weights->ne[1] == n_ch);
  GGML_ASSERT(weights->type == GGML_TYPE_F32 && ggml_is_contiguous(weights));
  GGML_ASSERT(states->type == GGML_TYPE_F32 && ggml_is_contiguous(states) &&
              states->ne[0] == (nc - 1) * n_ch);
  GGML_ASSERT(slots->type == GGML_TYPE_I32 && slots->ne[0] == n_s);
  ggml_tensor* args[] = {x, states, weights, slots};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, n_ch, n_t, n_s, 1, args, 4, conv_kernel, GGML_N_TASKS_MAX,
                        nullptr);
}

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

#include "model/kv_attention.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "model/q4_rows.h"
#include "model/rows_input.h"

namespace graft {

namespace {

constexpr int kBlock = 32;  // Q8_0
// ggml's flash attention takes F16 caches through its tiled kernel from
// this many rows (GGML_FA_TILE_Q), and one row over this many cells through
// its split over the cells (ops.cpp).
constexpr int64_t kGgmlTileRows = 64;
constexpr int64_t kGgmlSplitCells = 512;

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

GRAFT_VNNI512_VL inline __m512 round_f16(__m512 x) {
  return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
}

// One (row, head)'s query, in the form its cache's key product reads.
template <int D>
struct QueryQ8 {
  alignas(64) int8_t q[D];
  float d[D / kBlock];
};
template <int D>
struct QueryF16 {
  __m512 q[D / 16];  // F16 values
};

// The query quantized as ggml's quantize_row_q8_0 quantizes it: per block,
// d = the largest magnitude / 127 (kept as F16), q = the value times 127 /
// that magnitude, rounded to nearest even.
template <int D>
GRAFT_VNNI512_VL inline void load_query(const float* x, QueryQ8<D>& o) {
  for (int b = 0; b < D / kBlock; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + kBlock * b);
    const __m512 v1 = _mm512_loadu_ps(x + kBlock * b + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    o.d[b] = _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
    const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o.q + kBlock * b),
                     _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, id))));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o.q + kBlock * b + 16),
                     _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, id))));
  }
}
template <int D>
GRAFT_VNNI512_VL inline void load_query(const float* x, QueryF16<D>& o) {
  for (int j = 0; j < D / 16; ++j) o.q[j] = round_f16(_mm512_loadu_ps(x + 16 * j));
}

// A cell's key product, as ggml_vec_dot_q8_0_q8_0 sums it: per block 8
// lanes of exact sums of 4 products, each scaled by one fused multiply-add.
template <int D>
GRAFT_VNNI512_VL inline float key_product(const char* key, const QueryQ8<D>& q) {
  const auto* kb = reinterpret_cast<const Q8Block*>(key);
  __m256 dot = _mm256_setzero_ps();
  for (int b = 0; b < D / kBlock; ++b) {
    const __m256i kx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kb[b].qs));
    const __m256i qy = _mm256_load_si256(reinterpret_cast<const __m256i*>(q.q + kBlock * b));
    const __m256i sums =
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(kx, kx), _mm256_sign_epi8(qy, kx));
    dot = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(kb[b].d) * q.d[b]), _mm256_cvtepi32_ps(sums), dot);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, dot);
  return sum_lanes8(lanes);
}

// As ggml_vec_dot_f16 sums it (AVX-512 without FP16 arithmetic): 4
// accumulators of 16 lanes over each 64 inputs, added 0 + 2, 1 + 3, then
// together, then across the lanes.
template <int D>
GRAFT_VNNI512_VL inline float key_product(const char* key, const QueryF16<D>& q) {
  static_assert(D % 64 == 0);
  const auto* k = reinterpret_cast<const uint16_t*>(key);
  __m512 sum[4];
  for (int j = 0; j < 4; ++j)
    sum[j] = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + 16 * j))),
                           q.q[j]);
  for (int i = 64; i < D; i += 64)
    for (int j = 0; j < 4; ++j)
      sum[j] = _mm512_fmadd_ps(
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + i + 16 * j))),
          q.q[i / 16 + j], sum[j]);
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(sum[0], sum[2]), _mm512_add_ps(sum[1], sum[3])));
}

// acc += a cell's values times w, as ggml adds them: Q8_0 values
// dequantized (q times d, rounded) and added by fused multiply-adds into
// F32 accumulators; F16 values into accumulators kept as F16.
template <int D>
GRAFT_VNNI512_VL inline void add_values(const char* value, __m512 w, __m512* acc, const QueryQ8<D>&) {
  const auto* vb = reinterpret_cast<const Q8Block*>(value);
  for (int j = 0; j < D / 16; ++j) {
    const Q8Block& blk = vb[j / 2];
    const __m512 vals = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                          reinterpret_cast<const __m128i*>(blk.qs + 16 * (j % 2))))),
                                      _mm512_set1_ps(_cvtsh_ss(blk.d)));
    acc[j] = _mm512_fmadd_ps(vals, w, acc[j]);
  }
}
template <int D>
GRAFT_VNNI512_VL inline void add_values(const char* value, __m512 w, __m512* acc, const QueryF16<D>&) {
  const auto* v = reinterpret_cast<const uint16_t*>(value);
  for (int j = 0; j < D / 16; ++j) {
    const __m512 vals = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + 16 * j)));
    acc[j] = round_f16(_mm512_fmadd_ps(vals, w, acc[j]));
  }
}
template <int D>
GRAFT_VNNI512_VL inline void scale_values(__m512 m, __m512* acc, const QueryQ8<D>&) {
  for (int j = 0; j < D / 16; ++j) acc[j] = _mm512_mul_ps(acc[j], m);
}
template <int D>
GRAFT_VNNI512_VL inline void scale_values(__m512 m, __m512* acc, const QueryF16<D>&) {
  for (int j = 0; j < D / 16; ++j) acc[j] = round_f16(_mm512_mul_ps(acc[j], m));
}

// One (row, head)'s running maximum, sum and values over some cells.
template <int D>
struct Partial {
  float max = -INFINITY;
  float sum = 0.0f;
  __m512 acc[D / 16];
};

struct Cells {
  const char* k;  // the head's keys and values, cell c at + c * stride
  const char* v;
  size_t k_stride, v_stride;
  const ggml_fp16_t* mask;
};

// One (row, head) over cells [c0, c1), into p from nothing: ggml's online
// softmax, its running maximum, sum and values updated in ggml's order and
// roundings.
template <int D, typename Query>
GRAFT_VNNI512_VL void attend_cells(const Cells& cells, const Query& q, float scale, int64_t c0, int64_t c1,
                                   Partial<D>& p) {
  p.max = -INFINITY;
  p.sum = 0.0f;
  for (int j = 0; j < D / 16; ++j) p.acc[j] = _mm512_setzero_ps();
  for (int64_t c = c0; c < c1; ++c) {
    const float mv = _cvtsh_ss(cells.mask[c]);
    if (mv == -INFINITY) continue;
    float s = key_product<D>(cells.k + c * cells.k_stride, q);
    s = s * scale;
    s += mv;
    float ms = 1.0f;
    float vs = 1.0f;
    if (s > p.max) {
      ms = expf(p.max - s);
      p.max = s;
      scale_values<D>(_mm512_set1_ps(ms), p.acc, q);
    } else {
      vs = expf(s - p.max);
    }
    add_values<D>(cells.v + c * cells.v_stride, _mm512_set1_ps(vs), p.acc, q);
    p.sum = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(p.sum), _mm_set_ss(ms), _mm_set_ss(vs)));
  }
}

// Rows x heads [i0, i1) of the op (index r * n_head + h), each over its
// cells in n_chunks chunks joined as ggml joins them (more than one: one row
// over many F16 cells, which ggml cuts into a chunk per thread).
template <int D, typename Query>
GRAFT_VNNI512_VL void attend(ggml_tensor* dst, float scale, int64_t i0, int64_t i1, int64_t n_chunks) {
  const ggml_tensor* q = dst->src[0];
  const ggml_tensor* k = dst->src[1];
  const ggml_tensor* v = dst->src[2];
  const ggml_tensor* mask = dst->src[3];
  const int64_t n_head = q->ne[1];
  const int64_t group = n_head / k->ne[1];
  const int64_t n_cells = k->ne[2];
  Query query;
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t r = i / n_head;
    const int64_t h = i % n_head;
    load_query<D>(
        reinterpret_cast<const float*>(static_cast<const char*>(q->data) + r * q->nb[2] + h * q->nb[1]),
        query);
    const Cells cells{
        static_cast<const char*>(k->data) + (h / group) * k->nb[1],
        static_cast<const char*>(v->data) + (h / group) * v->nb[1], k->nb[2], v->nb[2],
        reinterpret_cast<const ggml_fp16_t*>(static_cast<const char*>(mask->data) + r * mask->nb[1])};
    Partial<D> p;
    if (n_chunks <= 1) {
      attend_cells<D>(cells, query, scale, 0, n_cells, p);
    } else {
      // ggml_flash_attn_ext_reduce_partials: the chunks joined in order.
      const int64_t chunk = (n_cells + n_chunks - 1) / n_chunks;
      Partial<D> part;
      for (int j = 0; j < D / 16; ++j) p.acc[j] = _mm512_setzero_ps();
      for (int64_t c0 = 0; c0 < n_cells; c0 += chunk) {
        attend_cells<D>(cells, query, scale, c0, std::min(n_cells, c0 + chunk), part);
        if (part.sum == 0.0f) continue;
        const float max = fmaxf(p.max, part.max);
        const float scale_old = expf(p.max - max);
        const float scale_new = expf(part.max - max);
        const __m512 so = _mm512_set1_ps(scale_old);
        const __m512 sn = _mm512_set1_ps(scale_new);
        for (int j = 0; j < D / 16; ++j)
          p.acc[j] = _mm512_fmadd_ps(p.acc[j], so, _mm512_mul_ps(part.acc[j], sn));
        p.sum = _mm_cvtss_f32(
            _mm_fmadd_ss(_mm_set_ss(p.sum), _mm_set_ss(scale_old), _mm_set_ss(part.sum * scale_new)));
        p.max = max;
      }
    }
    const __m512 inv = _mm512_set1_ps(p.sum == 0.0f ? 0.0f : 1.0f / p.sum);
    float* out = reinterpret_cast<float*>(static_cast<char*>(dst->data) + r * dst->nb[2] + h * dst->nb[1]);
    for (int j = 0; j < D / 16; ++j) _mm512_storeu_ps(out + 16 * j, _mm512_mul_ps(p.acc[j], inv));
  }
}

template <typename Query64, typename Query128, typename Query256>
void attend_width(ggml_tensor* dst, float scale, int64_t i0, int64_t i1, int64_t n_chunks) {
  switch (dst->ne[0]) {
    case 64:
      attend<64, Query64>(dst, scale, i0, i1, n_chunks);
      break;
    case 128:
      attend<128, Query128>(dst, scale, i0, i1, n_chunks);
      break;
    default:
      attend<256, Query256>(dst, scale, i0, i1, n_chunks);
      break;
  }
}

// Each thread a share of the (row, head) pairs.
void kv_attention_kernel(ggml_tensor* dst, int ith, int nth, void* userdata) {
  const float scale = scale_of(userdata);
  const int64_t total = dst->ne[1] * dst->ne[2];
  const int64_t i0 = total * ith / nth;
  const int64_t i1 = total * (ith + 1) / nth;
  if (dst->src[1]->type == GGML_TYPE_Q8_0) {
    attend_width<QueryQ8<64>, QueryQ8<128>, QueryQ8<256>>(dst, scale, i0, i1, 1);
  } else {
    const bool split = dst->ne[2] == 1 && dst->src[1]->ne[2] >= kGgmlSplitCells;
    attend_width<QueryF16<64>, QueryF16<128>, QueryF16<256>>(dst, scale, i0, i1, split ? nth : 1);
  }
}

bool cache_view(const ggml_tensor* t) {
  const int64_t d = t->ne[0];
  return (t->type == GGML_TYPE_Q8_0 || t->type == GGML_TYPE_F16) && (d == 64 || d == 128 || d == 256) &&
         t->ne[3] == 1 && t->nb[0] == ggml_type_size(t->type) && t->nb[1] >= ggml_row_size(t->type, d) &&
         t->nb[1] % 2 == 0 && t->nb[2] % 2 == 0;
}

}  // namespace

bool kv_attention_supported(const ggml_tensor* k, const ggml_tensor* v, int64_t n_rows) {
  return q4_rows_cpu() && cache_view(k) && cache_view(v) && k->type == v->type &&
         (k->type == GGML_TYPE_Q8_0 || n_rows < kGgmlTileRows) && k->ne[0] == v->ne[0] &&
         k->ne[1] == v->ne[1] && k->ne[2] == v->ne[2];
}

ggml_tensor* kv_attention(ggml_context* ctx, ggml_tensor* q, ggml_tensor* k, ggml_tensor* v,
                          ggml_tensor* mask, float scale) {
  GGML_ASSERT(kv_attention_supported(k, v, q->ne[2]));
  GGML_ASSERT(q->type == GGML_TYPE_F32 && q->ne[0] == k->ne[0] && q->nb[0] == sizeof(float) && q->ne[3] == 1);
  GGML_ASSERT(q->ne[1] % k->ne[1] == 0);
  GGML_ASSERT(mask && mask->type == GGML_TYPE_F16 && mask->ne[0] == k->ne[2] && mask->ne[1] >= q->ne[2]);
  ggml_tensor* args[] = {q, k, v, mask};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, q->ne[0], q->ne[1], q->ne[2], 1, args, 4, kv_attention_kernel,
                        GGML_N_TASKS_MAX, scale_bits(scale));
}

}  // namespace graft

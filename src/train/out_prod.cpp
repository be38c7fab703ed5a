// out_prod_f32 (train_ops.h): ggml's out_prod for F32 operands as a
// register-blocked product.
//
// dst[i, j] = sum_k a[i, k] * b[j, k] (per batch): every LoRA A/B gradient,
// the gradients through LoRA's own products, and the attention's. ggml's
// kernel adds one row of a into a row of dst per k (an axpy that loads and
// stores dst each time, and for LoRA B's gradient, rank-wide rows of 16
// floats). Here each thread computes tiles of 16 (or 8) columns i by up to
// 6 (or 12) rows j in registers over k, reading a and b in place through
// their strides (no packing), with k in chunks so a strip of a stays in
// cache across the tile row. Sums run over k in order, so the result does
// not depend on the thread count.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include <ggml-cpu.h>

#include "train/train_ops.h"

namespace graft {

namespace {

constexpr int64_t kChunkK = 256;  // k per pass over a tile row

// dst rows r < NR, W floats each (W = 8 * V): dst[r] (+)= sum_k b[r][k] * a[k],
// a[k] at a + k * lda (floats, contiguous), b[r][k] at b + r * ldb_j + k * ldb_k (bytes).
template <int V, int NR>
void tile_generic(const char* a, size_t lda, const char* b, size_t ldb_j, size_t ldb_k, int64_t n_k,
                  float* dst, int64_t ldd, bool add) {
  constexpr int W = 8 * V;
  float acc[NR][W];
  for (int r = 0; r < NR; ++r) {
    for (int j = 0; j < W; ++j) acc[r][j] = add ? dst[r * ldd + j] : 0.0f;
  }
  for (int64_t k = 0; k < n_k; ++k) {
    const auto* ak = reinterpret_cast<const float*>(a + size_t(k) * lda);
    for (int r = 0; r < NR; ++r) {
      const float g = *reinterpret_cast<const float*>(b + size_t(r) * ldb_j + size_t(k) * ldb_k);
      for (int j = 0; j < W; ++j) acc[r][j] += g * ak[j];
    }
  }
  for (int r = 0; r < NR; ++r) std::memcpy(dst + r * ldd, acc[r], sizeof(acc[r]));
}

#if defined(__x86_64__)
template <int V, int NR>
__attribute__((target("avx2,fma"))) void tile_avx2(const char* a, size_t lda, const char* b, size_t ldb_j,
                                                   size_t ldb_k, int64_t n_k, float* dst, int64_t ldd,
                                                   bool add) {
  __m256 acc[NR][V];
  for (int r = 0; r < NR; ++r) {
    for (int v = 0; v < V; ++v)
      acc[r][v] = add ? _mm256_loadu_ps(dst + r * ldd + 8 * v) : _mm256_setzero_ps();
  }
  const char* bp[NR];
  for (int r = 0; r < NR; ++r) bp[r] = b + size_t(r) * ldb_j;
  for (int64_t k = 0; k < n_k; ++k) {
    __m256 ak[V];
    for (int v = 0; v < V; ++v) ak[v] = _mm256_loadu_ps(reinterpret_cast<const float*>(a) + 8 * v);
    a += lda;
    for (int r = 0; r < NR; ++r) {
      const __m256 g = _mm256_broadcast_ss(reinterpret_cast<const float*>(bp[r]));
      bp[r] += ldb_k;
      for (int v = 0; v < V; ++v) acc[r][v] = _mm256_fmadd_ps(g, ak[v], acc[r][v]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(dst + r * ldd + 8 * v, acc[r][v]);
  }
}

bool has_avx2_fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif

using Tile = void (*)(const char*, size_t, const char*, size_t, size_t, int64_t, float*, int64_t, bool);

template <int V, int NR>
Tile pick() {
#if defined(__x86_64__)
  if (has_avx2_fma()) return tile_avx2<V, NR>;
#endif
  return tile_generic<V, NR>;
}

template <int V, int... NR>
const Tile* table(std::integer_sequence<int, NR...>) {
  static const Tile tiles[] = {pick<V, NR + 1>()...};
  return tiles;
}

// Rows per tile for strips of V vectors: the accumulators, V loads of a and
// one broadcast fit AVX2's 16 registers.
constexpr int rows_per_tile(int v) {
  return v == 2 ? 6 : 12;
}

Tile tile_for(int v, int n_rows) {
  static const Tile* wide = table<2>(std::make_integer_sequence<int, rows_per_tile(2)>());
  static const Tile* narrow = table<1>(std::make_integer_sequence<int, rows_per_tile(1)>());
  return v == 2 ? wide[n_rows - 1] : narrow[n_rows - 1];
}

// dst: F32 [m, n, ne2, ne3]; src[0] = a: F32 [m, K, ne02, ne03] with
// contiguous rows; src[1] = b: F32 [n, K, ne2, ne3], any strides.
void out_prod_kernel(ggml_tensor* dst, int ith, int nth, void*) {
  const ggml_tensor* a = dst->src[0];
  const ggml_tensor* b = dst->src[1];
  const int64_t m = dst->ne[0];
  const int64_t n = dst->ne[1];
  const int64_t n_k = a->ne[1];
  const int64_t n_batch = dst->ne[2] * dst->ne[3];
  const int64_t dps2 = dst->ne[2] / a->ne[2];
  const int64_t dps3 = dst->ne[3] / a->ne[3];
  // Strips of i: 16 columns, then one of 8, then single columns.
  const int64_t n_wide = m / 16;
  const int64_t n_narrow = (m % 16) / 8;
  const int64_t n_single = m % 8;
  const int64_t n_strips = n_wide + n_narrow + n_single;
  const int64_t units = n_batch * n_strips;
  // Each thread takes a range of (batch, strip, row block) tiles, row
  // blocks fastest. The row block size depends on the strip's width; the
  // split counts rows instead, so every thread gets a like share.
  const int64_t total = units * n;
  if (total == 0) return;
  const int64_t t0 = total * ith / nth;
  const int64_t t1 = total * (ith + 1) / nth;
  const size_t ldd = dst->nb[1] / sizeof(float);
  for (int64_t u = t0 / n; u <= (t1 - 1) / n && u < units; ++u) {
    const int64_t batch = u / n_strips;
    const int64_t strip = u % n_strips;
    const int64_t i2 = batch % dst->ne[2];
    const int64_t i3 = batch / dst->ne[2];
    int64_t col = 0, width = 1;
    if (strip < n_wide) {
      col = strip * 16;
      width = 16;
    } else if (strip < n_wide + n_narrow) {
      col = n_wide * 16;
      width = 8;
    } else {
      col = n_wide * 16 + n_narrow * 8 + (strip - n_wide - n_narrow);
    }
    const int64_t j_begin = std::max<int64_t>(0, t0 - u * n);
    const int64_t j_end = std::min<int64_t>(n, t1 - u * n);
    const char* a_base = static_cast<const char*>(a->data) + (i2 / dps2) * a->nb[2] + (i3 / dps3) * a->nb[3] +
                         size_t(col) * sizeof(float);
    const char* b_base = static_cast<const char*>(b->data) + i2 * b->nb[2] + i3 * b->nb[3];
    float* d_base =
        reinterpret_cast<float*>(static_cast<char*>(dst->data) + i2 * dst->nb[2] + i3 * dst->nb[3]) + col;
    for (int64_t k0 = 0; k0 < n_k; k0 += kChunkK) {
      const int64_t nk = std::min(kChunkK, n_k - k0);
      const char* ak = a_base + size_t(k0) * a->nb[1];
      if (width == 1) {
        for (int64_t j = j_begin; j < j_end; ++j) {
          const char* bj = b_base + size_t(j) * b->nb[0] + size_t(k0) * b->nb[1];
          float sum = k0 > 0 ? d_base[j * ldd] : 0.0f;
          for (int64_t k = 0; k < nk; ++k) {
            sum += *reinterpret_cast<const float*>(ak + size_t(k) * a->nb[1]) *
                   *reinterpret_cast<const float*>(bj + size_t(k) * b->nb[1]);
          }
          d_base[j * ldd] = sum;
        }
        continue;
      }
      const int v = int(width / 8);
      const int64_t block = rows_per_tile(v);
      for (int64_t j0 = j_begin; j0 < j_end; j0 += block) {
        const int nr = int(std::min(block, j_end - j0));
        tile_for(v, nr)(ak, a->nb[1], b_base + size_t(j0) * b->nb[0] + size_t(k0) * b->nb[1], b->nb[0],
                        b->nb[1], nk, d_base + j0 * ldd, int64_t(ldd), k0 > 0);
      }
    }
  }
}

}  // namespace

bool out_prod_f32_supported(const ggml_tensor* a, const ggml_tensor* b) {
  return a->type == GGML_TYPE_F32 && b->type == GGML_TYPE_F32 && a->nb[0] == sizeof(float) &&
         a->ne[1] == b->ne[1] && b->ne[2] % a->ne[2] == 0 && b->ne[3] % a->ne[3] == 0;
}

ggml_tensor* out_prod_f32(ggml_context* ctx, ggml_tensor* a, ggml_tensor* b) {
  GGML_ASSERT(out_prod_f32_supported(a, b));
  ggml_tensor* args[2] = {a, b};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, a->ne[0], b->ne[0], b->ne[2], b->ne[3], args, 2, out_prod_kernel,
                        GGML_N_TASKS_MAX, nullptr);
}

int use_out_prod_f32(ggml_context* ctx, ggml_cgraph* graph) {
  int replaced = 0;
  for (int i = 0; i < ggml_graph_n_nodes(graph); ++i) {
    ggml_tensor* node = ggml_graph_node(graph, i);
    if (node->op != GGML_OP_OUT_PROD || node->type != GGML_TYPE_F32) continue;
    if (!out_prod_f32_supported(node->src[0], node->src[1])) continue;
    if (!ggml_is_contiguous(node)) continue;
    replace_node_op(node, out_prod_f32(ctx, node->src[0], node->src[1]));
    ++replaced;
  }
  return replaced;
}

}  // namespace graft

#include "model/lora_ops.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include <ggml-cpu.h>

namespace graft {

namespace {

// y[o] = sum_k w[k] * B[k][o] for o in [0, n), B's rows in F16 or F32 at
// `stride` bytes apart. Each product is exact in float (F16 factors); the
// sum runs over k in order, in double, as ggml's F16 dot product sums short
// rows, so the result is the one ggml_mul_mat_id gave bit for bit.
// Outputs go in chunks whose accumulators stay in registers.
void combine_rows(float* y, const char* b, size_t stride, ggml_type type, const float* w, int64_t rank,
                  int64_t n) {
  constexpr int64_t kChunk = 32;
  const size_t es = ggml_type_size(type);
  for (int64_t o0 = 0; o0 < n; o0 += kChunk) {
    const int64_t m = std::min(kChunk, n - o0);
    double acc[kChunk] = {};
    float row[kChunk];
    for (int64_t k = 0; k < rank; ++k) {
      if (w[k] == 0.0f) continue;
      const char* src = b + size_t(k) * stride + size_t(o0) * es;
      if (type == GGML_TYPE_F16) {
        ggml_cpu_fp16_to_fp32(reinterpret_cast<const ggml_fp16_t*>(src), row, m);
      } else {
        std::copy_n(reinterpret_cast<const float*>(src), m, row);
      }
      const float wk = w[k];
      for (int64_t j = 0; j < m; ++j) acc[j] += double(wk * row[j]);
    }
    for (int64_t j = 0; j < m; ++j) y[o0 + j] = float(acc[j]);
  }
}

// Each thread takes a slice of the outputs, for every row and route entry.
void lora_b_kernel(ggml_tensor* dst, int ith, int nth, void*) {
  const ggml_tensor* ax = dst->src[0];
  const ggml_tensor* slots = dst->src[1];
  const ggml_tensor* b = dst->src[2];
  const int64_t n_out = b->ne[0];
  const int64_t rank = b->ne[1];
  const int64_t n_used = ax->ne[1];
  const int64_t n_rows = ax->ne[2];
  // Slices of whole cache lines (16 floats).
  const int64_t per = (n_out + nth - 1) / nth;
  const int64_t step = (per + 15) / 16 * 16;
  const int64_t o0 = std::min(n_out, step * ith);
  const int64_t o1 = std::min(n_out, o0 + step);
  if (o0 >= o1) return;
  std::vector<float> w(static_cast<size_t>(rank));
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t u = 0; u < n_used; ++u) {
      const int32_t slot = *reinterpret_cast<const int32_t*>(static_cast<const char*>(slots->data) +
                                                            u * slots->nb[0] + r * slots->nb[1]);
      const float* a = reinterpret_cast<const float*>(static_cast<const char*>(ax->data) + u * ax->nb[1] +
                                                      r * ax->nb[2]);
      // A x rounded as ggml's F16 matmul rounds its input.
      for (int64_t k = 0; k < rank; ++k) {
        w[size_t(k)] = b->type == GGML_TYPE_F16 ? ggml_fp16_to_fp32(ggml_fp32_to_fp16(a[k])) : a[k];
      }
      float* y = reinterpret_cast<float*>(static_cast<char*>(dst->data) + u * dst->nb[1] + r * dst->nb[2]);
      const char* base = static_cast<const char*>(b->data) + size_t(slot) * b->nb[2];
      combine_rows(y + o0, base + size_t(o0) * ggml_type_size(b->type), b->nb[1], b->type, w.data(), rank,
                   o1 - o0);
    }
  }
}

}  // namespace

ggml_tensor* lora_b_product(ggml_context* ctx, ggml_tensor* b_stack, ggml_tensor* ax, ggml_tensor* slots) {
  GGML_ASSERT(b_stack->type == GGML_TYPE_F16 || b_stack->type == GGML_TYPE_F32);
  GGML_ASSERT(ax->type == GGML_TYPE_F32 && ax->ne[0] == b_stack->ne[1]);
  GGML_ASSERT(slots->type == GGML_TYPE_I32 && slots->ne[0] == ax->ne[1] && slots->ne[1] == ax->ne[2]);
  ggml_tensor* args[] = {ax, slots, b_stack};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, b_stack->ne[0], ax->ne[1], ax->ne[2], 1, args, 3, lora_b_kernel,
                        GGML_N_TASKS_MAX, nullptr);
}

}  // namespace graft

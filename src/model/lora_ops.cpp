#include "model/lora_ops.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include <ggml-cpu.h>

namespace graft {

namespace {

// out[o] += scale * sum_k w[k] * B[k][o] for o in [0, n), B's rows in F16
// or F32 at `stride` bytes apart. Each product is exact in float (F16
// factors); the sum runs over k in order, in double, as ggml's F16 dot
// product sums short rows, so the sum is the one ggml_mul_mat_id gave bit for
// bit; it is rounded to float, scaled, rounded, and added, as ggml_mul and
// ggml_add do (this file is built without floating-point contraction, so
// none of that becomes a fused multiply-add). Outputs go in chunks whose
// accumulators stay in registers.
void add_combined_rows(float* out, const char* b, size_t stride, ggml_type type, const float* w, float scale,
                       int64_t rank, int64_t n) {
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
    for (int64_t j = 0; j < m; ++j) {
      const float term = float(acc[j]) * scale;
      out[o0 + j] = out[o0 + j] + term;
    }
  }
}

template <typename T>
const T& at(const ggml_tensor* t, int64_t i0, int64_t i1, int64_t i2) {
  return *reinterpret_cast<const T*>(static_cast<const char*>(t->data) + i0 * t->nb[0] + i1 * t->nb[1] +
                                     i2 * t->nb[2]);
}

// Each thread takes a slice of the outputs, for every row and route entry.
void lora_b_add_kernel(ggml_tensor* dst, int ith, int nth, void*) {
  const ggml_tensor* y = dst->src[0];
  const ggml_tensor* ax = dst->src[1];
  const ggml_tensor* slots = dst->src[2];
  const ggml_tensor* scales = dst->src[3];
  const ggml_tensor* b = dst->src[4];
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
    float* out = reinterpret_cast<float*>(static_cast<char*>(dst->data) + r * dst->nb[1]) + o0;
    std::copy_n(&at<float>(y, o0, r, 0), o1 - o0, out);
    for (int64_t u = 0; u < n_used; ++u) {
      const float scale = at<float>(scales, 0, u, r);
      if (scale == 0.0f) continue;  // a padding entry: no adapter
      const int32_t slot = at<int32_t>(slots, u, r, 0);
      const float* a = &at<float>(ax, 0, u, r);
      // A x rounded as ggml's F16 matmul rounds its input.
      for (int64_t k = 0; k < rank; ++k) {
        w[size_t(k)] = b->type == GGML_TYPE_F16 ? ggml_fp16_to_fp32(ggml_fp32_to_fp16(a[k])) : a[k];
      }
      const char* base = static_cast<const char*>(b->data) + size_t(slot) * b->nb[2];
      add_combined_rows(out, base + size_t(o0) * ggml_type_size(b->type), b->nb[1], b->type, w.data(), scale,
                        rank, o1 - o0);
    }
  }
}

}  // namespace

ggml_tensor* lora_b_add(ggml_context* ctx, ggml_tensor* y, ggml_tensor* b_stack, ggml_tensor* ax,
                        ggml_tensor* slots, ggml_tensor* scales) {
  GGML_ASSERT(b_stack->type == GGML_TYPE_F16 || b_stack->type == GGML_TYPE_F32);
  GGML_ASSERT(ax->type == GGML_TYPE_F32 && ax->ne[0] == b_stack->ne[1]);
  GGML_ASSERT(slots->type == GGML_TYPE_I32 && slots->ne[0] == ax->ne[1] && slots->ne[1] == ax->ne[2]);
  GGML_ASSERT(scales->type == GGML_TYPE_F32 && scales->ne[1] == ax->ne[1] && scales->ne[2] == ax->ne[2]);
  GGML_ASSERT(y->type == GGML_TYPE_F32 && y->ne[0] == b_stack->ne[0] && y->ne[1] == ax->ne[2]);
  GGML_ASSERT(y->nb[0] == sizeof(float));
  ggml_tensor* args[] = {y, ax, slots, scales, b_stack};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, y->ne[0], y->ne[1], 1, 1, args, 5, lora_b_add_kernel,
                        GGML_N_TASKS_MAX, nullptr);
}

}  // namespace graft

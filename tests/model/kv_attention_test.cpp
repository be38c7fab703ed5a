// kv_attention against ggml's flash attention on the same F16 and Q8_0
// caches.
#include "model/kv_attention.h"

#include <cmath>
#include <random>
#include <vector>

#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml-cpp.h>
#include <ggml-cpu.h>
#include <gtest/gtest.h>

#include "model/q4_rows.h"

namespace graft {
namespace {

struct Shape {
  int64_t head_dim, n_head, n_head_kv, n_cells, n_rows;
};

struct Outputs {
  std::vector<float> ggml, ours;
};

// Random keys and values (a few cells with an outlier, one all zero), a
// query per row and head, and a mask: row r sees the cells up to its own
// (a causal window that starts at a different cell per row), less every
// seventh; the last row of a group of more than 2 sees nothing.
Outputs attend_both_ways(ggml_type type, const Shape& s, float scale, int threads, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t kv_row = s.head_dim * s.n_head_kv;
  std::vector<float> kf(size_t(kv_row * s.n_cells)), vf(kf.size());
  std::vector<float> qf(size_t(s.head_dim * s.n_head * s.n_rows));
  for (float& x : kf) x = normal(rng);
  for (float& x : vf) x = normal(rng);
  for (float& x : qf) x = normal(rng) * 2.0f;
  for (int64_t c = 0; c < s.n_cells; c += 5) kf[size_t(c * kv_row)] = 30.0f;
  if (s.n_cells > 3) std::fill(vf.begin() + 3 * kv_row, vf.begin() + 4 * kv_row, 0.0f);
  std::vector<ggml_fp16_t> mask(size_t(s.n_cells * s.n_rows));
  for (int64_t r = 0; r < s.n_rows; ++r) {
    const int64_t last = s.n_cells - 1 - (s.n_rows - 1 - r);
    for (int64_t c = 0; c < s.n_cells; ++c) {
      const bool sees = c <= last && c % 7 != 6 && !(s.n_rows > 2 && r == s.n_rows - 1);
      mask[size_t(r * s.n_cells + c)] = ggml_fp32_to_fp16(sees ? 0.0f : -INFINITY);
    }
  }
  const size_t row_bytes = ggml_row_size(type, kv_row);
  std::vector<uint8_t> kq(row_bytes * size_t(s.n_cells)), vq(kq.size());
  ggml_quantize_chunk(type, kf.data(), kq.data(), 0, s.n_cells, kv_row, nullptr);
  ggml_quantize_chunk(type, vf.data(), vq.data(), 0, s.n_cells, kv_row, nullptr);

  ggml_init_params params{};
  params.mem_size = 32 * ggml_tensor_overhead() + ggml_graph_overhead();
  params.no_alloc = true;
  ggml_context_ptr ctx(ggml_init(params));
  ggml_tensor* k = ggml_new_tensor_3d(ctx.get(), type, s.head_dim, s.n_head_kv, s.n_cells);
  ggml_tensor* v = ggml_new_tensor_3d(ctx.get(), type, s.head_dim, s.n_head_kv, s.n_cells);
  ggml_tensor* q = ggml_new_tensor_3d(ctx.get(), GGML_TYPE_F32, s.head_dim, s.n_head, s.n_rows);
  ggml_tensor* m = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F16, s.n_cells, s.n_rows);
  for (ggml_tensor* t : {k, v, q, m}) ggml_set_input(t);
  Outputs out;
  if (!kv_attention_supported(k, v, s.n_rows)) return out;
  ggml_tensor* a = ggml_flash_attn_ext(ctx.get(), ggml_permute(ctx.get(), q, 0, 2, 1, 3),
                                       ggml_permute(ctx.get(), k, 0, 2, 1, 3),
                                       ggml_permute(ctx.get(), v, 0, 2, 1, 3), m, scale, 0.0f, 0.0f);
  ggml_flash_attn_ext_set_prec(a, GGML_PREC_F32);
  ggml_tensor* b = kv_attention(ctx.get(), q, k, v, m, scale);
  ggml_set_output(a);
  ggml_set_output(b);
  ggml_cgraph* graph = ggml_new_graph(ctx.get());
  ggml_build_forward_expand(graph, a);
  ggml_build_forward_expand(graph, b);
  ggml_backend_ptr backend(ggml_backend_cpu_init());
  ggml_backend_cpu_set_n_threads(backend.get(), threads);
  ggml_backend_buffer_ptr buf(ggml_backend_alloc_ctx_tensors(ctx.get(), backend.get()));
  ggml_backend_tensor_set(k, kq.data(), 0, kq.size());
  ggml_backend_tensor_set(v, vq.data(), 0, vq.size());
  ggml_backend_tensor_set(q, qf.data(), 0, qf.size() * sizeof(float));
  ggml_backend_tensor_set(m, mask.data(), 0, mask.size() * sizeof(ggml_fp16_t));
  EXPECT_EQ(ggml_backend_graph_compute(backend.get(), graph), GGML_STATUS_SUCCESS);
  out.ggml.resize(qf.size());
  out.ours.resize(qf.size());
  ggml_backend_tensor_get(a, out.ggml.data(), 0, out.ggml.size() * sizeof(float));
  ggml_backend_tensor_get(b, out.ours.data(), 0, out.ours.size() * sizeof(float));
  return out;
}

void expect_matches_ggml(ggml_type type, const std::vector<Shape>& shapes) {
  for (int threads : {1, 2, 3}) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      const Shape& s = shapes[i];
      const float scale = 1.0f / std::sqrt(float(s.head_dim));
      const Outputs o = attend_both_ways(type, s, scale, threads, unsigned(11 + i));
      if (o.ggml.empty()) GTEST_SKIP() << "no AVX-512 VNNI on this machine";
      size_t unequal = 0, first = 0, zeros = 0;
      for (size_t j = 0; j < o.ggml.size(); ++j) {
        ASSERT_TRUE(std::isfinite(o.ggml[j]));
        zeros += o.ggml[j] == 0.0f;
        if (o.ggml[j] == o.ours[j]) continue;
        if (unequal++ == 0) first = j;
      }
      EXPECT_EQ(unequal, 0u) << ggml_type_name(type) << " shape " << i << ", " << threads
                             << " threads: the first at " << first << ": ggml " << o.ggml[first] << ", ours "
                             << o.ours[first];
      if (s.n_rows > 2) {
        EXPECT_GE(zeros, size_t(s.head_dim * s.n_head)) << "a row that sees no cell reads 0";
      }
    }
  }
}

// Decode (one row), a few rows, a prefill chunk; 64-, 128- and 256-wide
// heads; grouped and plain heads; a single cell and hundreds.
const std::vector<Shape> kShapes = {{64, 32, 8, 300, 1},  {64, 32, 8, 1, 1},  {128, 16, 4, 97, 1},
                                    {128, 8, 8, 40, 5},   {64, 4, 2, 700, 3}, {256, 4, 1, 65, 2},
                                    {128, 16, 2, 512, 32}};

std::vector<Shape> with(std::vector<Shape> shapes, std::initializer_list<Shape> more) {
  shapes.insert(shapes.end(), more);
  return shapes;
}

// And 80 rows.
TEST(KvAttention, MatchesGgmlOnAQ8_0Cache) {
  expect_matches_ggml(GGML_TYPE_Q8_0, with(kShapes, {{64, 8, 2, 200, 80}}));
}

// Up to 63 rows (ggml tiles more), and one row over 512 cells or more, which
// ggml splits into a chunk of cells per thread.
TEST(KvAttention, MatchesGgmlOnAnF16Cache) {
  expect_matches_ggml(
      GGML_TYPE_F16,
      with(kShapes, {{64, 32, 8, 511, 1}, {64, 32, 8, 512, 1}, {128, 8, 2, 1300, 1}, {64, 4, 4, 2, 63}}));
}

}  // namespace
}  // namespace graft

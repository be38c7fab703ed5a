// q8_rows against ggml's own product on the same Q8_0 weights.
#include "model/q8_rows.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <ggml-backend.h>
#include <ggml-cpp.h>
#include <ggml-cpu.h>
#include <gtest/gtest.h>

#include "model/q4_rows.h"
#include "rows_test_data.h"

namespace graft {
namespace {

struct Products {
  std::vector<float> ggml;
  std::vector<float> q8_rows;
};

// w [n_in, n_out] (random, Q8_0, a few bytes -128, which ggml's quantizer
// never writes but a file may hold) times x [n_in, n_rows], both ways.
Products multiply(int64_t n_in, int64_t n_out, int64_t n_rows, unsigned seed) {
  const testing::RowsTestData data = testing::rows_test_data(n_in, n_out, n_rows, seed);
  const std::vector<float>& wf = data.w;
  const std::vector<float>& xf = data.x;
  const size_t row_bytes = ggml_row_size(GGML_TYPE_Q8_0, n_in);
  std::vector<uint8_t> wq(row_bytes * size_t(n_out));
  ggml_quantize_chunk(GGML_TYPE_Q8_0, wf.data(), wq.data(), 0, n_out, n_in, nullptr);
  for (int64_t c = 0; c < n_out; c += 3) wq[size_t(c) * row_bytes + 2 + size_t(c % 32)] = 0x80;

  Products out;
  ggml_init_params params{};
  params.mem_size = 16 * ggml_tensor_overhead() + ggml_graph_overhead();
  params.no_alloc = true;
  ggml_context_ptr ctx(ggml_init(params));
  ggml_tensor* w = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_Q8_0, n_in, n_out);
  ggml_tensor* x = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, n_in, n_rows);
  ggml_set_input(x);
  ggml_backend_ptr backend(ggml_backend_cpu_init());
  ggml_backend_cpu_set_n_threads(backend.get(), 2);
  ggml_backend_buffer_ptr wbuf(ggml_backend_alloc_ctx_tensors(ctx.get(), backend.get()));
  ggml_backend_tensor_set(w, wq.data(), 0, wq.size());
  if (!q8_rows_supported(w)) return out;

  ggml_init_params gparams{};
  gparams.mem_size = 16 * ggml_tensor_overhead() + ggml_graph_overhead();
  gparams.no_alloc = true;
  ggml_context_ptr gctx(ggml_init(gparams));
  ggml_tensor* a = ggml_mul_mat(gctx.get(), w, x);
  ggml_tensor* b = q8_rows_mul_mat(gctx.get(), w, q4_rows_quantize(gctx.get(), x));
  ggml_set_output(a);
  ggml_set_output(b);
  ggml_cgraph* graph = ggml_new_graph(gctx.get());
  ggml_build_forward_expand(graph, a);
  ggml_build_forward_expand(graph, b);
  ggml_backend_buffer_ptr buf(ggml_backend_alloc_ctx_tensors(gctx.get(), backend.get()));
  ggml_backend_tensor_set(x, xf.data(), 0, xf.size() * sizeof(float));
  EXPECT_EQ(ggml_backend_graph_compute(backend.get(), graph), GGML_STATUS_SUCCESS);
  out.ggml.resize(size_t(n_out * n_rows));
  out.q8_rows.resize(out.ggml.size());
  ggml_backend_tensor_get(a, out.ggml.data(), 0, out.ggml.size() * sizeof(float));
  ggml_backend_tensor_get(b, out.q8_rows.data(), 0, out.q8_rows.size() * sizeof(float));
  return out;
}

// Every output equal, bit for bit, and finite (a NaN equals nothing).
void expect_equal(const Products& p, int64_t n_in, int64_t n_out, int64_t rows, float& worst) {
  size_t unequal = 0, first = 0;
  float top = 0.0f, largest = 0.0f;
  for (size_t i = 0; i < p.ggml.size(); ++i) {
    const float a = p.ggml[i], b = p.q8_rows[i];
    if (std::isfinite(a)) top = std::max(top, std::fabs(a));
    if (std::isfinite(a) && a == b) continue;
    if (unequal++ == 0) first = i;
    if (std::isfinite(a - b)) largest = std::max(largest, std::fabs(a - b));
  }
  EXPECT_EQ(unequal, 0u) << n_in << "x" << n_out << ", " << rows << " rows; the first at " << first
                         << ": ggml " << p.ggml[first] << ", q8_rows " << p.q8_rows[first];
  if (top > 0.0f) worst = std::max(worst, largest / top);
}

// One row (its own path), every row count of one pass (2-4) and of several
// (the 4-row tiles and their tails, more than one chunk of rows), against
// each of ggml's paths (one row: its dot product; more: its tiles of up to
// 4 x 4 and their tails), over short, odd and long inputs (one block, an odd
// number, up to 256) and weight row counts that fill the passes' groups of
// 8 or leave a tail.
TEST(Q8Rows, MatchesGgml) {
  struct Shape {
    int64_t n_in, n_out;
  };
  float worst = 0.0f;
  for (const Shape s : {Shape{32, 5}, Shape{96, 16}, Shape{2080, 24}, Shape{8192, 17}}) {
    for (int64_t rows = 1; rows <= 70; ++rows) {
      const Products p = multiply(s.n_in, s.n_out, rows, unsigned(rows * 7 + s.n_in));
      if (p.ggml.empty()) GTEST_SKIP() << "no AVX-512 VNNI on this machine";
      expect_equal(p, s.n_in, s.n_out, rows, worst);
    }
  }
  for (const Shape s : {Shape{2048, 40}, Shape{160, 33}, Shape{8192, 8}}) {
    const Products p = multiply(s.n_in, s.n_out, 512, unsigned(s.n_in + s.n_out));
    expect_equal(p, s.n_in, s.n_out, 512, worst);
  }
  std::printf("[ q8_rows vs ggml ] largest deviation: %.3g of the largest output\n", double(worst));
}

// Only plain Q8_0 weights: not Q4_0, not F32.
TEST(Q8Rows, TakesOnlyQ8_0) {
  ggml_init_params params{};
  params.mem_size = 4 * ggml_tensor_overhead();
  params.no_alloc = true;
  ggml_context_ptr ctx(ggml_init(params));
  ggml_tensor* q8 = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_Q8_0, 64, 8);
  ggml_tensor* q4 = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_Q4_0, 64, 8);
  ggml_tensor* f32 = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, 64, 8);
  EXPECT_FALSE(q8_rows_supported(q8));  // not allocated yet
  ggml_backend_buffer_ptr buffer(
      ggml_backend_alloc_ctx_tensors_from_buft(ctx.get(), ggml_backend_cpu_buffer_type()));
  EXPECT_EQ(q8_rows_supported(q8), q4_rows_cpu());
  EXPECT_FALSE(q8_rows_supported(q4));
  EXPECT_FALSE(q8_rows_supported(f32));
}

}  // namespace
}  // namespace graft

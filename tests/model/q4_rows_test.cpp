// q4_rows against ggml's own product on the same repacked Q4_0 weights.
#include "model/q4_rows.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml-cpp.h>
#include <ggml-cpu.h>
#include <gtest/gtest.h>

#include "model/cpu_repack.h"
#include "rows_test_data.h"

namespace graft {
namespace {

struct Products {
  std::vector<float> ggml;
  std::vector<float> q4_rows;
};

// w [n_in, n_out] (random, Q4_0, repacked) times x [n_in, n_rows], both ways.
Products multiply(int64_t n_in, int64_t n_out, int64_t n_rows, unsigned seed) {
  const testing::RowsTestData data = testing::rows_test_data(n_in, n_out, n_rows, seed);
  const std::vector<float>& wf = data.w;
  const std::vector<float>& xf = data.x;
  std::vector<uint8_t> wq(ggml_row_size(GGML_TYPE_Q4_0, n_in) * size_t(n_out));
  ggml_quantize_chunk(GGML_TYPE_Q4_0, wf.data(), wq.data(), 0, n_out, n_in, nullptr);

  ggml_init_params params{};
  params.mem_size = 16 * ggml_tensor_overhead() + ggml_graph_overhead();
  params.no_alloc = true;
  ggml_context* ctx = ggml_init(params);
  ggml_tensor* w = ggml_new_tensor_2d(ctx, GGML_TYPE_Q4_0, n_in, n_out);
  ggml_backend_buffer_type_t repack = repack_buffer_type();
  ggml_backend_buffer_t wbuf = repack ? ggml_backend_alloc_ctx_tensors_from_buft(ctx, repack) : nullptr;
  Products out;
  if (wbuf) ggml_backend_tensor_set(w, wq.data(), 0, wq.size());  // repacks
  if (!wbuf || !q4_rows_supported(w)) {
    if (wbuf) ggml_backend_buffer_free(wbuf);
    ggml_free(ctx);
    return out;
  }

  ggml_init_params gparams{};
  gparams.mem_size = 16 * ggml_tensor_overhead() + ggml_graph_overhead();
  gparams.no_alloc = true;
  ggml_context* gctx = ggml_init(gparams);
  ggml_tensor* x = ggml_new_tensor_2d(gctx, GGML_TYPE_F32, n_in, n_rows);
  ggml_set_input(x);
  ggml_tensor* a = ggml_mul_mat(gctx, w, x);
  ggml_tensor* b = q4_rows_mul_mat(gctx, w, q4_rows_quantize(gctx, x));
  ggml_set_output(a);
  ggml_set_output(b);
  ggml_cgraph* graph = ggml_new_graph(gctx);
  ggml_build_forward_expand(graph, a);
  ggml_build_forward_expand(graph, b);
  ggml_backend_t backend = ggml_backend_cpu_init();
  ggml_backend_cpu_set_n_threads(backend, 2);
  ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(gctx, backend);
  ggml_backend_tensor_set(x, xf.data(), 0, xf.size() * sizeof(float));
  EXPECT_EQ(ggml_backend_graph_compute(backend, graph), GGML_STATUS_SUCCESS);
  out.ggml.resize(size_t(n_out * n_rows));
  out.q4_rows.resize(out.ggml.size());
  ggml_backend_tensor_get(a, out.ggml.data(), 0, out.ggml.size() * sizeof(float));
  ggml_backend_tensor_get(b, out.q4_rows.data(), 0, out.q4_rows.size() * sizeof(float));
  ggml_backend_buffer_free(buf);
  ggml_backend_free(backend);
  ggml_free(gctx);
  ggml_backend_buffer_free(wbuf);
  ggml_free(ctx);
  return out;
}

// Every row count a pass covers (1-8), two passes (9-16) and more, against
// each of ggml's paths (one row, four, sixteen, and their tails), over short
// and long inputs and a few or many column groups.
TEST(Q4Rows, MatchesGgmlOnRepackedWeights) {
  struct Shape {
    int64_t n_in, n_out;
  };
  float worst = 0.0f;
  // (8192 inputs and 101 rows: more than one chunk of each for many rows.)
  for (const Shape s : {Shape{64, 8}, Shape{256, 72}, Shape{2048, 64}, Shape{8192, 16}}) {
    for (int64_t rows : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 16, 17, 20, 33, 64, 101}) {
      const Products p = multiply(s.n_in, s.n_out, rows, unsigned(rows * 7 + s.n_in));
      if (p.ggml.empty()) GTEST_SKIP() << "no repacked Q4_0 or no AVX-512 VNNI on this machine";
      // The same quantized inputs, integer block sums and fused multiply-adds
      // in the same order as each of ggml's paths (one row, four, sixteen):
      // every output equal, bit for bit, and finite (a NaN equals nothing).
      size_t unequal = 0, first = 0;
      float top = 0.0f, largest = 0.0f;
      for (size_t i = 0; i < p.ggml.size(); ++i) {
        const float a = p.ggml[i], b = p.q4_rows[i];
        if (std::isfinite(a)) top = std::max(top, std::fabs(a));
        if (std::isfinite(a) && a == b) continue;
        if (unequal++ == 0) first = i;
        if (std::isfinite(a - b)) largest = std::max(largest, std::fabs(a - b));
      }
      EXPECT_EQ(unequal, 0u) << s.n_in << "x" << s.n_out << ", " << rows << " rows; the first at " << first
                             << ": ggml " << p.ggml[first] << ", q4_rows " << p.q4_rows[first];
      if (top > 0.0f) worst = std::max(worst, largest / top);
    }
  }
  std::printf("[ q4_rows vs ggml ] largest deviation: %.3g of the largest output\n", double(worst));
}

// The layout check behind every reader of repacked Q4_0 (cpu_repack.h):
// ggml's repacking in this tree passes it; the plain Q4_0 rows, or a
// repacking that differs in one byte, do not. (Needs only ggml's repack
// buffer, which AVX2 CPUs have, not q4_rows' AVX-512.)
TEST(Q4Rows, LayoutCheckAcceptsGgmlsRepackingOnly) {
  EXPECT_TRUE(q4x8_layout_is_ggmls());
  ggml_backend_buffer_type_t repack = repack_buffer_type();
  ASSERT_NE(repack, nullptr) << "this build of ggml has no CPU_REPACK buffer";
  const int64_t n_in = 256, n_out = 64;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> wf(size_t(n_in * n_out));
  for (float& v : wf) v = normal(rng);
  std::vector<uint8_t> wq(ggml_row_size(GGML_TYPE_Q4_0, n_in) * size_t(n_out));
  ggml_quantize_chunk(GGML_TYPE_Q4_0, wf.data(), wq.data(), 0, n_out, n_in, nullptr);

  ggml_init_params params{};
  params.mem_size = 4 * ggml_tensor_overhead();
  params.no_alloc = true;
  ggml_context_ptr ctx(ggml_init(params));
  ggml_tensor* packed = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_Q4_0, n_in, n_out);
  ggml_backend_buffer_ptr buffer(ggml_backend_alloc_ctx_tensors_from_buft(ctx.get(), repack));
  ASSERT_TRUE(buffer);
  ggml_backend_tensor_set(packed, wq.data(), 0, wq.size());  // repacks
  EXPECT_TRUE(q4x8_layout_matches(packed, wq.data()));
  EXPECT_TRUE(is_q4x8(packed));

  std::vector<uint8_t> plain(wq);  // what an unrepacked copy holds
  std::vector<uint8_t> saved(ggml_nbytes(packed));
  std::memcpy(saved.data(), packed->data, saved.size());
  std::memcpy(packed->data, plain.data(), plain.size());
  EXPECT_FALSE(q4x8_layout_matches(packed, wq.data()));
  std::memcpy(packed->data, saved.data(), saved.size());
  static_cast<uint8_t*>(packed->data)[ggml_nbytes(packed) - 1] ^= 0x01;  // the last block's last byte
  EXPECT_FALSE(q4x8_layout_matches(packed, wq.data()));
}

}  // namespace
}  // namespace graft

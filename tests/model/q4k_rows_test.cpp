// q4k_rows and q6k_rows against ggml's own product on the same Q4_K weights
// (repacked) and Q5_K and Q6_K weights (as files store them).
#include "model/q4k_rows.h"

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
#include "model/q6k_rows.h"

namespace graft {
namespace {

struct Products {
  std::vector<float> ggml;
  std::vector<float> q4k_rows;
};

// Q6_K blocks of w [n_in, n_out] made extreme: every fifth weight row's
// first block all zero; every seventh's last block random bytes, its scales
// reaching both ends of int8 and its d large or tiny.
void make_extreme_q6k(std::vector<uint8_t>& wq, int64_t n_in, int64_t n_out, std::mt19937& rng) {
  constexpr size_t kBlockBytes = 210;  // ql[128], qh[64], scales[16], d
  const int64_t nb = n_in / 256;
  std::uniform_int_distribution<int> byte(0, 255);
  for (int64_t o = 0; o < n_out; ++o) {
    uint8_t* row = wq.data() + size_t(o * nb) * kBlockBytes;
    if (o % 5 == 2) std::fill(row, row + kBlockBytes, uint8_t(0));
    if (o % 7 == 4) {
      uint8_t* blk = row + size_t(nb - 1) * kBlockBytes;
      for (size_t i = 0; i < 208; ++i) blk[i] = uint8_t(byte(rng));
      blk[192] = 0x80;  // scales -128 and 127
      blk[193] = 0x7F;
      const ggml_fp16_t d = ggml_fp32_to_fp16(o % 2 ? 300.0f : 3e-5f);
      std::memcpy(blk + 208, &d, sizeof(d));
    }
  }
}

// w [n_in, n_out] (random, Q4_K repacked or Q5_K or Q6_K as files store it)
// times x [n_in, n_rows], both ways.
Products multiply(ggml_type type, int64_t n_in, int64_t n_out, int64_t n_rows, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> wf(size_t(n_in * n_out));
  std::vector<float> xf(size_t(n_in * n_rows));
  for (float& v : wf) v = normal(rng) * 0.05f + 0.01f;
  for (float& v : xf) v = normal(rng);
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = xf.data() + r * n_in;
    row[0] = 40.0f * float(r % 3);  // an outlier: a coarse scale
    if (r % 5 == 1) {
      // The largest magnitude as both signs, the negative first: ggml's
      // quantizations for four rows and for one take different signs.
      row[n_in - 200] = -60.0f;
      row[n_in - 100] = 60.0f;
    }
    if (r % 7 == 3) std::fill(row + 256, row + std::min<int64_t>(n_in, 512), 0.0f);  // an all-zero block
  }
  std::vector<uint8_t> wq(ggml_row_size(type, n_in) * size_t(n_out));
  ggml_quantize_chunk(type, wf.data(), wq.data(), 0, n_out, n_in, nullptr);
  if (type == GGML_TYPE_Q6_K) make_extreme_q6k(wq, n_in, n_out, rng);

  ggml_init_params params{};
  params.mem_size = 16 * ggml_tensor_overhead() + ggml_graph_overhead();
  params.no_alloc = true;
  ggml_context_ptr ctx(ggml_init(params));
  ggml_tensor* w = ggml_new_tensor_2d(ctx.get(), type, n_in, n_out);
  const bool q4k = type == GGML_TYPE_Q4_K;
  ggml_backend_buffer_type_t buft = q4k ? repack_buffer_type() : ggml_backend_cpu_buffer_type();
  ggml_backend_buffer_ptr wbuf(buft ? ggml_backend_alloc_ctx_tensors_from_buft(ctx.get(), buft) : nullptr);
  Products out;
  if (wbuf) ggml_backend_tensor_set(w, wq.data(), 0, wq.size());  // repacks Q4_K
  const bool q6k = type == GGML_TYPE_Q6_K;
  if (!wbuf || !(q4k ? q4k_rows_supported(w) : q6k ? q6k_rows_supported(w) : q5k_rows_supported(w)))
    return out;

  ggml_context_ptr gctx(ggml_init(params));
  ggml_tensor* x = ggml_new_tensor_2d(gctx.get(), GGML_TYPE_F32, n_in, n_rows);
  ggml_set_input(x);
  ggml_tensor* a = ggml_mul_mat(gctx.get(), w, x);
  ggml_tensor* b = q4k   ? q4k_rows_mul_mat(gctx.get(), w, q4k_rows_quantize(gctx.get(), x))
                   : q6k ? q6k_rows_mul_mat(gctx.get(), w, q5k_rows_quantize(gctx.get(), x))
                         : q5k_rows_mul_mat(gctx.get(), w, q5k_rows_quantize(gctx.get(), x));
  ggml_set_output(a);
  ggml_set_output(b);
  ggml_cgraph* graph = ggml_new_graph(gctx.get());
  ggml_build_forward_expand(graph, a);
  ggml_build_forward_expand(graph, b);
  ggml_backend_ptr backend(ggml_backend_cpu_init());
  ggml_backend_cpu_set_n_threads(backend.get(), 2);
  ggml_backend_buffer_ptr buf(ggml_backend_alloc_ctx_tensors(gctx.get(), backend.get()));
  ggml_backend_tensor_set(x, xf.data(), 0, xf.size() * sizeof(float));
  EXPECT_EQ(ggml_backend_graph_compute(backend.get(), graph), GGML_STATUS_SUCCESS);
  out.ggml.resize(size_t(n_out * n_rows));
  out.q4k_rows.resize(out.ggml.size());
  ggml_backend_tensor_get(a, out.ggml.data(), 0, out.ggml.size() * sizeof(float));
  ggml_backend_tensor_get(b, out.q4k_rows.data(), 0, out.q4k_rows.size() * sizeof(float));
  return out;
}

// Every row count from 1 to 70 (one pass of four or eight rows, several,
// and each of ggml's tails of one to three rows) and 512 (many chunks of
// rows), over short and long inputs and a few or many column groups (for
// Q6_K also a last group of fewer than 8 columns).
void expect_matches_ggml(ggml_type type) {
  struct Shape {
    int64_t n_in, n_out;
  };
  const bool q6k = type == GGML_TYPE_Q6_K;
  const std::vector<Shape> shapes = q6k ? std::vector<Shape>{{256, 13}, {512, 72}, {2048, 61}, {8192, 19}}
                                        : std::vector<Shape>{{256, 8}, {512, 72}, {2048, 64}, {8192, 16}};
  std::vector<int64_t> row_counts;
  for (int64_t rows = 1; rows <= 70; ++rows) row_counts.push_back(rows);
  row_counts.push_back(512);
  float worst = 0.0f;
  for (const Shape s : shapes) {
    for (int64_t rows : row_counts) {
      if (rows == 512 && s.n_in < 2048) continue;
      const Products p = multiply(type, s.n_in, s.n_out, rows, unsigned(rows * 7 + s.n_in));
      if (p.ggml.empty()) GTEST_SKIP() << "no AVX-512 VNNI (or no repacked Q4_K) on this machine";
      // The same quantized inputs, exact integer sums and fused multiply-adds
      // in the same order as each of ggml's paths (for Q4_K rows in fours,
      // the rest one by one; for Q5_K and Q6_K every row alone): every output equal,
      // bit for bit, and finite.
      size_t unequal = 0, first = 0;
      float top = 0.0f, largest = 0.0f;
      for (size_t i = 0; i < p.ggml.size(); ++i) {
        const float a = p.ggml[i], b = p.q4k_rows[i];
        if (std::isfinite(a)) top = std::max(top, std::fabs(a));
        if (std::isfinite(a) && a == b) continue;
        if (unequal++ == 0) first = i;
        if (std::isfinite(a - b)) largest = std::max(largest, std::fabs(a - b));
      }
      EXPECT_EQ(unequal, 0u) << ggml_type_name(type) << " " << s.n_in << "x" << s.n_out << ", " << rows
                             << " rows; the first at " << first << ": ggml " << p.ggml[first] << ", ours "
                             << p.q4k_rows[first];
      if (top > 0.0f) worst = std::max(worst, largest / top);
    }
  }
  std::printf("[ %s rows vs ggml ] largest deviation: %.3g of the largest output\n", ggml_type_name(type),
              double(worst));
}

TEST(Q4KRows, MatchesGgmlOnRepackedWeights) {
  expect_matches_ggml(GGML_TYPE_Q4_K);
}

TEST(Q5KRows, MatchesGgml) {
  expect_matches_ggml(GGML_TYPE_Q5_K);
}

TEST(Q6KRows, MatchesGgml) {
  expect_matches_ggml(GGML_TYPE_Q6_K);
}

// The layout check behind q4k_rows (cpu_repack.h): ggml's repacking in this
// tree passes it; the plain Q4_K rows, or a repacking that differs in one
// byte of the scales or the quants, do not. (Needs only ggml's repack buffer,
// which AVX2 CPUs have, not AVX-512.)
TEST(Q4KRows, LayoutCheckAcceptsGgmlsRepackingOnly) {
  EXPECT_TRUE(q4kx8_layout_is_ggmls());
  ggml_backend_buffer_type_t repack = repack_buffer_type();
  ASSERT_NE(repack, nullptr) << "this build of ggml has no CPU_REPACK buffer";
  const int64_t n_in = 512, n_out = 64;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> wf(size_t(n_in * n_out));
  for (float& v : wf) v = normal(rng);
  std::vector<uint8_t> wq(ggml_row_size(GGML_TYPE_Q4_K, n_in) * size_t(n_out));
  ggml_quantize_chunk(GGML_TYPE_Q4_K, wf.data(), wq.data(), 0, n_out, n_in, nullptr);

  ggml_init_params params{};
  params.mem_size = 4 * ggml_tensor_overhead();
  params.no_alloc = true;
  ggml_context_ptr ctx(ggml_init(params));
  ggml_tensor* packed = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_Q4_K, n_in, n_out);
  ggml_backend_buffer_ptr buffer(ggml_backend_alloc_ctx_tensors_from_buft(ctx.get(), repack));
  ASSERT_TRUE(buffer);
  ggml_backend_tensor_set(packed, wq.data(), 0, wq.size());  // repacks
  EXPECT_TRUE(q4kx8_layout_matches(packed, wq.data()));
  EXPECT_TRUE(is_q4kx8(packed));
  EXPECT_FALSE(is_q4x8(packed));

  std::vector<uint8_t> saved(ggml_nbytes(packed));
  std::memcpy(saved.data(), packed->data, saved.size());
  std::memcpy(packed->data, wq.data(), wq.size());  // what an unrepacked copy holds
  EXPECT_FALSE(q4kx8_layout_matches(packed, wq.data()));
  for (size_t at : {size_t(32 + 13), saved.size() - 1}) {  // a scales byte of the first block; the last byte
    std::memcpy(packed->data, saved.data(), saved.size());
    static_cast<uint8_t*>(packed->data)[at] ^= 0x40;
    EXPECT_FALSE(q4kx8_layout_matches(packed, wq.data())) << "byte " << at;
  }
}

}  // namespace
}  // namespace graft

// graft's training ops against plain references: frozen_dx against W^T dy
// over the weight dequantized to F32 (every plain type, and Q4_0 as ggml
// repacks it), out_prod_f32 against out_prod's definition,
// cross_entropy_rows against a direct log-softmax, and the dropout mask's
// rate and repeatability.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml-cpp.h>
#include <ggml-cpu.h>

#include "model/cpu_repack.h"
#include "train/int8_dx.h"
#include "train/train_ops.h"

namespace graft {
namespace {

struct Compute {
  ggml_context_ptr ctx;
  ggml_cgraph* graph = nullptr;
  ggml_backend_ptr backend{ggml_backend_cpu_init()};
  std::vector<ggml_backend_buffer_ptr> buffers;

  Compute() {
    ggml_init_params params{};
    params.mem_size = ggml_tensor_overhead() * 64 + ggml_graph_overhead();
    params.no_alloc = true;
    ctx.reset(ggml_init(params));
    graph = ggml_new_graph(ctx.get());
    ggml_backend_cpu_set_n_threads(backend.get(), 2);
  }
  // Allocates the tensors made so far in a buffer of this type.
  void alloc(ggml_backend_buffer_type_t type) {
    buffers.emplace_back(ggml_backend_alloc_ctx_tensors_from_buft(ctx.get(), type));
  }
  void run(ggml_tensor* out) {
    ggml_build_forward_expand(graph, out);
    ggml_gallocr_ptr allocator(ggml_gallocr_new(ggml_backend_cpu_buffer_type()));
    ASSERT_TRUE(ggml_gallocr_alloc_graph(allocator.get(), graph));
    ASSERT_EQ(ggml_backend_graph_compute(backend.get(), graph), GGML_STATUS_SUCCESS);
    allocators.push_back(std::move(allocator));
  }
  std::vector<ggml_gallocr_ptr> allocators;
};

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// dx = W^T dy for W [n_in, n_out] of `type`, with the weight in a buffer of
// `buffer_type` (ggml's repack buffer repacks Q4_0 when it is set). With
// int8, through the weight's transposed Q8_0 copy (FrozenTransposes).
void check_frozen_dx(ggml_type type, ggml_backend_buffer_type_t buffer_type, int64_t n_in, int64_t n_out,
                     int64_t n_rows, bool int8 = false) {
  const std::vector<float> w_f32 = random_values(size_t(n_in * n_out), 1);
  const std::vector<float> dy = random_values(size_t(n_out * n_rows), 2);
  // The weight in its type, and the floats it stands for.
  std::vector<uint8_t> w_data(ggml_row_size(type, n_in) * size_t(n_out));
  std::vector<float> w_ref(w_f32.size());
  if (type == GGML_TYPE_F32) {
    std::memcpy(w_data.data(), w_f32.data(), w_data.size());
    w_ref = w_f32;
  } else {
    ggml_quantize_chunk(type, w_f32.data(), w_data.data(), 0, n_out, n_in, nullptr);
    ggml_get_type_traits(type)->to_float(w_data.data(), w_ref.data(), n_in * n_out);
  }

  Compute c;
  ggml_tensor* w = ggml_new_tensor_2d(c.ctx.get(), type, n_in, n_out);
  c.alloc(buffer_type);
  ggml_backend_tensor_set(w, w_data.data(), 0, w_data.size());
  ggml_tensor* grad = ggml_new_tensor_2d(c.ctx.get(), GGML_TYPE_F32, n_out, n_rows);
  c.alloc(ggml_backend_cpu_buffer_type());
  ggml_backend_tensor_set(grad, dy.data(), 0, dy.size() * sizeof(float));
  ASSERT_TRUE(frozen_dx_supported(w)) << ggml_type_name(type);
  FrozenTransposes transposes;
  if (int8) {
    transposes.build({w}, 2);
    ASSERT_EQ(transposes.count(), 1u) << ggml_type_name(type);
    ASSERT_EQ(transposes.bytes(), ggml_row_size(GGML_TYPE_Q8_0, n_out) * size_t(n_in));
  }
  ggml_tensor* dx =
      frozen_dx(c.ctx.get(), w, ggml_transpose(c.ctx.get(), grad), int8 ? &transposes : nullptr);
  // The int8 product is graft's own where the CPU runs it (int8_dx.h), else ggml's over Q8_0.
  ASSERT_EQ(dx->op, int8 && !int8_dx_cpu() ? GGML_OP_MUL_MAT : GGML_OP_CUSTOM);
  c.run(dx);
  std::vector<float> out(size_t(n_in * n_rows));
  ggml_backend_tensor_get(dx, out.data(), 0, out.size() * sizeof(float));

  // dy as the forward would round an activation for this weight: Q8_0
  // blocks of 32 (the int8 path's yardstick).
  std::vector<float> dy_q8(dy.size());
  {
    std::vector<uint8_t> q(ggml_row_size(GGML_TYPE_Q8_0, n_out) * size_t(n_rows));
    ggml_quantize_chunk(GGML_TYPE_Q8_0, dy.data(), q.data(), 0, n_rows, n_out, nullptr);
    ggml_get_type_traits(GGML_TYPE_Q8_0)->to_float(q.data(), dy_q8.data(), int64_t(dy.size()));
  }

  double worst = 0.0, err2 = 0.0, err2_q8 = 0.0, ref2 = 0.0;
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t i = 0; i < n_in; ++i) {
      double want = 0.0, scale = 0.0, rounded = 0.0;
      for (int64_t o = 0; o < n_out; ++o) {
        want += double(w_ref[size_t(o * n_in + i)]) * dy[size_t(r * n_out + o)];
        rounded += double(w_ref[size_t(o * n_in + i)]) * dy_q8[size_t(r * n_out + o)];
        scale += std::abs(double(w_ref[size_t(o * n_in + i)]) * dy[size_t(r * n_out + o)]);
      }
      const double got = out[size_t(r * n_in + i)];
      worst = std::max(worst, std::abs(got - want) / std::max(scale, 1e-30));
      err2 += (got - want) * (got - want);
      err2_q8 += (rounded - want) * (rounded - want);
      ref2 += want * want;
    }
  }
  if (!int8) {
    // Error relative to the sum of magnitudes: float rounding only.
    EXPECT_LT(worst, 1e-6) << ggml_type_name(type) << " " << n_in << "x" << n_out << " rows " << n_rows;
    return;
  }
  // The int8 product rounds dy to Q8_0 (as the forward rounds x: alone that
  // is an error of rel_q8, about 0.5% of the norm on normal data) and W's
  // values once more to 8 bits per 32 output rows (about as much again).
  // So: within 2x of dy's rounding alone, and 1.5% of the norm.
  const double rel = std::sqrt(err2 / ref2), rel_q8 = std::sqrt(err2_q8 / ref2);
  EXPECT_LT(rel, 2.0 * rel_q8) << ggml_type_name(type) << " " << n_in << "x" << n_out << " rows " << n_rows;
  EXPECT_LT(rel, 1.5e-2) << ggml_type_name(type) << " " << n_in << "x" << n_out << " rows " << n_rows;
  EXPECT_GT(rel, 0.0);  // it did take the int8 path
  std::printf("int8 dx %s %lldx%lld rows %lld: rel error %.4f (dy's Q8_0 rounding alone %.4f)\n",
              ggml_type_name(type), (long long)n_in, (long long)n_out, (long long)n_rows, rel, rel_q8);
}

TEST(FrozenDx, MatchesDequantizedReferenceForEveryPlainType) {
  for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0,
                         GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K}) {
    check_frozen_dx(type, ggml_backend_cpu_buffer_type(), 512, 136, 7);
  }
}

TEST(FrozenDx, OddRowAndColumnCounts) {
  check_frozen_dx(GGML_TYPE_Q8_0, ggml_backend_cpu_buffer_type(), 96, 300, 1);
  check_frozen_dx(GGML_TYPE_F32, ggml_backend_cpu_buffer_type(), 288, 5, 13);
  // One strip of columns (LoRA's rank 16): the threads split dx's rows.
  check_frozen_dx(GGML_TYPE_F32, ggml_backend_cpu_buffer_type(), 16, 300, 50);
  check_frozen_dx(GGML_TYPE_F32, ggml_backend_cpu_buffer_type(), 16, 7, 1);
}

TEST(FrozenDx, ReadsRepackedQ4_0) {
  // Where this CPU has no repacked layout, the weight stays plain.
  ggml_backend_buffer_type_t repack = repack_buffer_type();
  if (!repack) repack = ggml_backend_cpu_buffer_type();
  check_frozen_dx(GGML_TYPE_Q4_0, repack, 512, 136, 9);
  check_frozen_dx(GGML_TYPE_Q4_0, repack, 2048, 64, 3);
}

TEST(FrozenDx, Int8ThroughTransposedQ8_0Copies) {
  for (ggml_type type : {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K}) {
    check_frozen_dx(type, ggml_backend_cpu_buffer_type(), 512, 160, 7, true);
  }
  ggml_backend_buffer_type_t repack = repack_buffer_type();
  if (!repack) repack = ggml_backend_cpu_buffer_type();
  check_frozen_dx(GGML_TYPE_Q4_0, repack, 512, 136 + 24, 9, true);
  check_frozen_dx(GGML_TYPE_Q4_0, repack, 2048, 64, 300, true);
  // K in more than one chunk of int8_dx (128 blocks), rows in more than one of 64.
  check_frozen_dx(GGML_TYPE_Q8_0, ggml_backend_cpu_buffer_type(), 64, 32 * 130, 70, true);
}

TEST(FrozenDx, TransposesOnlyQuantizedWeightsWithWholeBlocksOfRows) {
  Compute c;
  ggml_tensor* f16 = ggml_new_tensor_2d(c.ctx.get(), GGML_TYPE_F16, 64, 64);
  ggml_tensor* odd = ggml_new_tensor_2d(c.ctx.get(), GGML_TYPE_Q8_0, 64, 40);
  ggml_tensor* q8 = ggml_new_tensor_2d(c.ctx.get(), GGML_TYPE_Q8_0, 64, 96);
  c.alloc(ggml_backend_cpu_buffer_type());
  FrozenTransposes transposes;
  transposes.build({f16, odd, q8, q8}, 1);
  EXPECT_EQ(transposes.count(), 1u);
  EXPECT_EQ(transposes.find(f16), nullptr);
  EXPECT_EQ(transposes.find(odd), nullptr);
  ASSERT_NE(transposes.find(q8), nullptr);
  if (int8_dx_cpu()) {  // 16 columns of W per row, 3 blocks of 32 rows each
    EXPECT_EQ(transposes.find(q8)->ne[0], 3 * int64_t(sizeof(Q8x16)));
    EXPECT_EQ(transposes.find(q8)->ne[1], 4);
  } else {
    EXPECT_EQ(transposes.find(q8)->ne[0], 96);
    EXPECT_EQ(transposes.find(q8)->ne[1], 64);
  }
  // Without a copy, frozen_dx stays on its F32 product.
  ggml_tensor* dy = ggml_new_tensor_2d(c.ctx.get(), GGML_TYPE_F32, 40, 3);
  EXPECT_EQ(frozen_dx(c.ctx.get(), odd, ggml_transpose(c.ctx.get(), dy), &transposes)->op, GGML_OP_CUSTOM);
}

// out_prod_f32 against ggml's out_prod definition, dst[i, j] = sum_k a[i, k]
// b[j, k], for a of m x K (a broadcast over b's batches) and b either
// contiguous or a transpose view, as ggml's backward passes them. Run with
// 1 and 3 threads: the sums must be the same bit for bit.
void check_out_prod(int64_t m, int64_t n, int64_t n_k, int64_t batches_a, int64_t batches_b,
                    bool b_transposed) {
  const std::vector<float> a_values = random_values(size_t(m * n_k * batches_a), 4);
  const std::vector<float> b_values = random_values(size_t(n * n_k * batches_b), 5);
  std::vector<float> results[2];
  for (int threads : {1, 3}) {
    Compute c;
    ggml_backend_cpu_set_n_threads(c.backend.get(), threads);
    ggml_tensor* a = ggml_new_tensor_3d(c.ctx.get(), GGML_TYPE_F32, m, n_k, batches_a);
    // b stored as [n, K] or, transposed, as [K, n] (viewed as [n, K]).
    ggml_tensor* b_store = b_transposed ? ggml_new_tensor_3d(c.ctx.get(), GGML_TYPE_F32, n_k, n, batches_b)
                                        : ggml_new_tensor_3d(c.ctx.get(), GGML_TYPE_F32, n, n_k, batches_b);
    c.alloc(ggml_backend_cpu_buffer_type());
    ggml_backend_tensor_set(a, a_values.data(), 0, ggml_nbytes(a));
    ggml_backend_tensor_set(b_store, b_values.data(), 0, ggml_nbytes(b_store));
    ggml_tensor* b = b_transposed ? ggml_transpose(c.ctx.get(), b_store) : b_store;
    ASSERT_TRUE(out_prod_f32_supported(a, b));
    ggml_tensor* out = out_prod_f32(c.ctx.get(), a, b);
    ASSERT_EQ(out->ne[0], m);
    ASSERT_EQ(out->ne[1], n);
    ASSERT_EQ(out->ne[2], batches_b);
    c.run(out);
    std::vector<float>& got = results[threads == 1 ? 0 : 1];
    got.resize(size_t(ggml_nelements(out)));
    ggml_backend_tensor_get(out, got.data(), 0, ggml_nbytes(out));
  }
  EXPECT_EQ(results[0], results[1]) << "the thread count changed the sums";
  const std::vector<float>& got = results[0];
  const int64_t per_a = batches_b / batches_a;
  double worst = 0.0;
  for (int64_t z = 0; z < batches_b; ++z) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < m; ++i) {
        double want = 0.0, scale = 0.0;
        for (int64_t k = 0; k < n_k; ++k) {
          const double x = a_values[size_t(((z / per_a) * n_k + k) * m + i)];
          const double y = b_transposed ? b_values[size_t((z * n + j) * n_k + k)]
                                        : b_values[size_t((z * n_k + k) * n + j)];
          want += x * y;
          scale += std::abs(x * y);
        }
        worst = std::max(worst, std::abs(got[size_t((z * n + j) * m + i)] - want) / std::max(scale, 1e-30));
      }
    }
  }
  EXPECT_LT(worst, 1e-6) << m << "x" << n << " K " << n_k << " batches " << batches_a << "/" << batches_b
                         << (b_transposed ? " b transposed" : "");
}

TEST(OutProdF32, MatchesTheDefinitionForLoraAndAttentionShapes) {
  check_out_prod(16, 300, 50, 1, 1, false);  // LoRA B's gradient: rank x n_out over rows
  check_out_prod(96, 16, 50, 1, 1, false);   // LoRA A's gradient: n_in x rank over rows
  check_out_prod(16, 50, 600, 1, 1, true);   // through B: rank x rows over n_out (k in chunks)
  check_out_prod(96, 50, 16, 1, 1, true);    // through A: n_in x rows over rank
  check_out_prod(8, 37, 21, 1, 1, false);    // rank 8: strips of 8 columns
  check_out_prod(27, 13, 7, 1, 1, true);     // 16 + 8 + 3 columns
  check_out_prod(1, 5, 3, 1, 1, false);
  check_out_prod(32, 24, 24, 2, 6, false);  // grouped-query attention: a shared by 3 batches of b
  check_out_prod(24, 32, 40, 4, 4, true);
}

TEST(OutProdF32, ReplacesTheF32OutProdsOfABackwardGraph) {
  ggml_init_params params{};
  params.mem_size = ggml_tensor_overhead() * 128 + ggml_graph_overhead_custom(128, true);
  params.no_alloc = true;
  ggml_context_ptr owner(ggml_init(params));
  ggml_context* ctx = owner.get();
  ggml_tensor* a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 32, 8);
  ggml_tensor* b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 8, 32);
  ggml_tensor* x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 32, 5);
  ggml_set_param(a);
  ggml_set_param(b);
  ggml_tensor* loss = ggml_sum(ctx, ggml_mul_mat(ctx, b, ggml_mul_mat(ctx, a, x)));
  ggml_set_loss(loss);
  ggml_cgraph* graph = ggml_new_graph_custom(ctx, 128, true);
  ggml_build_forward_expand(graph, loss);
  ggml_build_backward_expand(ctx, graph, nullptr);
  int before = 0;
  for (int i = 0; i < ggml_graph_n_nodes(graph); ++i)
    before += ggml_graph_node(graph, i)->op == GGML_OP_OUT_PROD;
  EXPECT_GE(before, 2);  // A's and B's gradients
  EXPECT_EQ(use_out_prod_f32(ctx, graph), before);
  for (int i = 0; i < ggml_graph_n_nodes(graph); ++i)
    EXPECT_NE(ggml_graph_node(graph, i)->op, GGML_OP_OUT_PROD);
}

TEST(CrossEntropyRows, LossAndGradientMatchLogSoftmax) {
  const int64_t n_vocab = 1000, n_rows = 5;
  const std::vector<float> logits = random_values(size_t(n_vocab * n_rows), 3);
  const std::vector<int32_t> labels = {0, 999, 17, 500, 17};
  const std::vector<float> weights = {0.5f, 1.0f, 0.0f, 2.0f, 0.25f};
  Compute c;
  ggml_tensor* x = ggml_new_tensor_2d(c.ctx.get(), GGML_TYPE_F32, n_vocab, n_rows);
  ggml_tensor* lab = ggml_new_tensor_1d(c.ctx.get(), GGML_TYPE_I32, n_rows);
  ggml_tensor* w = ggml_new_tensor_1d(c.ctx.get(), GGML_TYPE_F32, n_rows);
  ggml_tensor* loss = ggml_new_tensor_1d(c.ctx.get(), GGML_TYPE_F64, n_rows);
  c.alloc(ggml_backend_cpu_buffer_type());
  ggml_backend_tensor_set(x, logits.data(), 0, ggml_nbytes(x));
  ggml_backend_tensor_set(lab, labels.data(), 0, ggml_nbytes(lab));
  ggml_backend_tensor_set(w, weights.data(), 0, ggml_nbytes(w));
  ggml_tensor* grad = cross_entropy_rows(c.ctx.get(), x, lab, w, loss);
  c.run(grad);
  std::vector<float> g(size_t(n_vocab * n_rows));
  std::vector<double> l(static_cast<size_t>(n_rows));
  ggml_backend_tensor_get(grad, g.data(), 0, ggml_nbytes(grad));
  ggml_backend_tensor_get(loss, l.data(), 0, ggml_nbytes(loss));
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* row = logits.data() + r * n_vocab;
    double max = row[0], sum = 0.0;
    for (int64_t i = 0; i < n_vocab; ++i) max = std::max(max, double(row[i]));
    for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(double(row[i]) - max);
    const double lse = max + std::log(sum);
    EXPECT_NEAR(l[size_t(r)], lse - row[labels[size_t(r)]], 1e-6) << "row " << r;
    for (int64_t i = 0; i < n_vocab; ++i) {
      const double p = std::exp(double(row[i]) - lse);
      const double want = weights[size_t(r)] * (p - (i == labels[size_t(r)] ? 1.0 : 0.0));
      ASSERT_NEAR(g[size_t(r * n_vocab + i)], want, 1e-6) << "row " << r << " token " << i;
    }
  }
}

TEST(DropoutMask, DropsAtTheRateAndRepeatsPerKey) {
  uint64_t step = 42;
  DropoutKey key{&step, 3, 0.25f};
  auto draw = [&]() {
    Compute c;
    ggml_tensor* m = dropout_mask(c.ctx.get(), 256, 64, &key);
    c.run(m);
    std::vector<float> v(256 * 64);
    ggml_backend_tensor_get(m, v.data(), 0, ggml_nbytes(m));
    return v;
  };
  const std::vector<float> a = draw();
  int dropped = 0;
  for (float x : a) {
    ASSERT_TRUE(x == 0.0f || std::abs(x - 1.0f / 0.75f) < 1e-6f) << x;
    dropped += x == 0.0f;
  }
  EXPECT_NEAR(double(dropped) / double(a.size()), 0.25, 0.02);
  EXPECT_EQ(draw(), a);  // the same key: the same mask
  step = 43;
  EXPECT_NE(draw(), a);  // another step: another mask
}

}  // namespace
}  // namespace graft

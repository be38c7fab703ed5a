// graft's training ops against plain references: frozen_dx against W^T dy
// over the weight dequantized to F32 (every plain type, and Q4_0 as ggml
// repacks it), cross_entropy_rows against a direct log-softmax, and the
// dropout mask's rate and repeatability.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml-cpp.h>
#include <ggml-cpu.h>

#include "model/cpu_repack.h"
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
// `buffer_type` (ggml's repack buffer repacks Q4_0 when it is set).
void check_frozen_dx(ggml_type type, ggml_backend_buffer_type_t buffer_type, int64_t n_in, int64_t n_out,
                     int64_t n_rows) {
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
  ggml_tensor* dx = frozen_dx(c.ctx.get(), w, ggml_transpose(c.ctx.get(), grad));
  c.run(dx);
  std::vector<float> out(size_t(n_in * n_rows));
  ggml_backend_tensor_get(dx, out.data(), 0, out.size() * sizeof(float));

  double worst = 0.0;
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t i = 0; i < n_in; ++i) {
      double want = 0.0, scale = 0.0;
      for (int64_t o = 0; o < n_out; ++o) {
        want += double(w_ref[size_t(o * n_in + i)]) * dy[size_t(r * n_out + o)];
        scale += std::abs(double(w_ref[size_t(o * n_in + i)]) * dy[size_t(r * n_out + o)]);
      }
      worst = std::max(worst, std::abs(double(out[size_t(r * n_in + i)]) - want) / std::max(scale, 1e-30));
    }
  }
  // Error relative to the sum of magnitudes: float rounding only.
  EXPECT_LT(worst, 1e-6) << ggml_type_name(type) << " " << n_in << "x" << n_out << " rows " << n_rows;
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
}

TEST(FrozenDx, ReadsRepackedQ4_0) {
  // Where this CPU has no repacked layout, the weight stays plain.
  ggml_backend_buffer_type_t repack = repack_buffer_type();
  if (!repack) repack = ggml_backend_cpu_buffer_type();
  check_frozen_dx(GGML_TYPE_Q4_0, repack, 512, 136, 9);
  check_frozen_dx(GGML_TYPE_Q4_0, repack, 2048, 64, 3);
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

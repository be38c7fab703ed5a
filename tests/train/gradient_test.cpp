// The LoRA gradients of graft's backward pass against central finite
// differences of its own loss, on tiny models of every base type that
// trains. Quantized bases are checked against the differences of the same
// model dequantized to F32.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "adapters/targets.h"
#include "train/config.h"
#include "train/fixtures.h"
#include "train/lora_params.h"
#include "train/train_graph.h"

namespace graft {
namespace {

using testing::dequantized_copy;
using testing::gradient_spec;
using testing::random_batch;
using testing::test_model_path;

constexpr float kScale = 2.0f;
constexpr float kBStd = 0.2f;  // B is zero at the start of training; here it has values, so A has gradients
constexpr double kEps = 1e-2;  // step of the differences: larger costs truncation, smaller rounding

struct Trained {
  std::unique_ptr<Model> model;
  std::unique_ptr<LoraParams> params;
  std::unique_ptr<TrainGraph> graph;
};

Trained make_setup(const std::string& path, int threads, bool checkpoint = false) {
  Trained s;
  auto model = Model::load(path);
  EXPECT_TRUE(model) << model.error().message;
  s.model = std::move(*model);
  const ModelConfig& c = s.model->config();
  std::vector<int> layers(size_t(c.n_layer));
  std::iota(layers.begin(), layers.end(), 0);
  auto params = LoraParams::create(c, 4, layers, {kTrainTargets.begin(), kTrainTargets.end()});
  EXPECT_TRUE(params) << params.error().message;
  s.params = std::move(*params);
  s.params->init(7);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, kBStd);
  for (const LoraParams::Pair& p : s.params->pairs()) {
    auto* b = static_cast<float*>(p.b->data);
    for (int64_t i = 0; i < ggml_nelements(p.b); ++i) b[i] = normal(rng);
  }
  TrainGraphOptions options;
  options.lora_scale = kScale;
  options.n_threads = threads;
  options.grad_checkpoint = checkpoint;
  s.graph = std::make_unique<TrainGraph>(*s.model, *s.params, options);
  return s;
}

double weighted_loss(TrainGraph& graph, const MicroBatch& batch) {
  auto losses = graph.evaluate(batch);
  EXPECT_TRUE(losses) << losses.error().message;
  double sum = 0.0;
  for (size_t i = 0; i < losses->loss.size(); ++i) sum += double(losses->loss[i]) * double(batch.weights[i]);
  return sum;
}

struct Checked {
  const char* matrix;
  int pair;
  int64_t index;
  float grad;
};

// The elements to check in every A and B: the four of largest gradient.
std::vector<Checked> pick_elements(const LoraParams& params) {
  std::vector<Checked> out;
  for (size_t p = 0; p < params.pairs().size(); ++p) {
    const LoraParams::Pair& pair = params.pairs()[p];
    for (auto [name, grad] : {std::pair{"A", pair.grad_a}, std::pair{"B", pair.grad_b}}) {
      const auto* g = static_cast<const float*>(grad->data);
      std::vector<int64_t> idx(size_t(ggml_nelements(grad)));
      std::iota(idx.begin(), idx.end(), 0);
      std::partial_sort(idx.begin(), idx.begin() + 4, idx.end(),
                        [&](int64_t x, int64_t y) { return std::abs(g[x]) > std::abs(g[y]); });
      for (int k = 0; k < 4; ++k) out.push_back({name, int(p), idx[size_t(k)], g[idx[size_t(k)]]});
    }
  }
  return out;
}

// Central differences of order 4 in the checked element.
double finite_difference(Trained& s, const MicroBatch& batch, const Checked& e, double eps) {
  const LoraParams::Pair& pair = s.params->pairs()[size_t(e.pair)];
  float* w = static_cast<float*>((e.matrix[0] == 'A' ? pair.a : pair.b)->data) + e.index;
  const float original = *w;
  auto at = [&](double delta) {
    *w = float(double(original) + delta);
    const double actual = double(*w) - double(original);
    const double loss = weighted_loss(*s.graph, batch);
    *w = original;
    return std::pair{loss, actual};
  };
  auto [l1, d1] = at(eps);
  auto [l_1, d_1] = at(-eps);
  auto [l2, d2] = at(2 * eps);
  auto [l_2, d_2] = at(-2 * eps);
  (void)d_1;
  (void)d_2;
  (void)d2;
  return (8.0 * (l1 - l_1) - (l2 - l_2)) / (12.0 * d1);
}

void check_gradients(const std::string& arch, const std::string& type, double tolerance) {
  const std::string path = test_model_path(gradient_spec(arch, type));
  const std::string reference_path = type == "f32" ? path : dequantized_copy(path);
  Trained trained = make_setup(path, 1);
  Trained reference = make_setup(reference_path, 1);
  const MicroBatch batch = random_batch(2, 12, trained.model->config().n_vocab, 3);
  auto losses = trained.graph->accumulate(batch, 0);
  ASSERT_TRUE(losses) << losses.error().message;
  double worst = 0.0;
  for (const Checked& e : pick_elements(*trained.params)) {
    const double fd = finite_difference(reference, batch, e, kEps);
    const double err = std::abs(double(e.grad) - fd) / std::max(std::abs(double(e.grad)), std::abs(fd));
    worst = std::max(worst, err);
    EXPECT_LE(err, tolerance) << arch << " " << type << " pair " << e.pair << " " << e.matrix << "["
                              << e.index << "]: backward " << e.grad << ", finite difference " << fd;
  }
  std::printf("%s %s: worst relative error %.2e\n", arch.c_str(), type.c_str(), worst);
}

TEST(Gradients, F32LlamaMatchFiniteDifferences) {
  check_gradients("llama", "f32", 1e-3);
}
TEST(Gradients, F32Qwen3MatchFiniteDifferences) {
  check_gradients("qwen3", "f32", 1e-3);
}
// Quantized bases: the forward multiplies their weights with activations
// rounded to F16 (F16 weights) or to 8-bit blocks (Q8_0, Q4_0), as serving
// does, so its loss is not quite the dequantized model's; measured worst
// errors here are ~9e-4 (F16) and ~2-3e-2 (Q8_0, Q4_0). For F16 and BF16
// the backward's product through the frozen weights matches the dequantized
// weights to float rounding; for Q8_0 and Q4_0 it rounds dy to Q8_0 as the
// forward rounds x (and W^T to Q8_0), the same order of error as the
// forward's (ops_test.cpp, docs/training.md), so the bound stays.
TEST(Gradients, F16MatchDequantizedFiniteDifferences) {
  check_gradients("llama", "f16", 3e-3);
}
// BF16 weights: the forward rounds activations to BF16 (8-bit mantissa);
// measured worst error ~5e-3.
TEST(Gradients, BF16MatchDequantizedFiniteDifferences) {
  check_gradients("qwen3", "bf16", 1.5e-2);
}
TEST(Gradients, Q8_0MatchDequantizedFiniteDifferences) {
  check_gradients("llama", "q8_0", 6e-2);
}
TEST(Gradients, Q4_0MatchDequantizedFiniteDifferences) {
  check_gradients("qwen3", "q4_0", 6e-2);
}

// Gradients accumulated in one pass, with gradient checkpointing, and with
// another thread count: the same numbers.
std::vector<float> all_grads(const LoraParams& params) {
  std::vector<float> out;
  for (const LoraParams::Pair& p : params.pairs()) {
    for (ggml_tensor* g : {p.grad_a, p.grad_b}) {
      const auto* v = static_cast<const float*>(g->data);
      out.insert(out.end(), v, v + ggml_nelements(g));
    }
  }
  return out;
}

TEST(Gradients, CheckpointingAndThreadsChangeNothing) {
  const std::string path = test_model_path(gradient_spec("llama", "q4_0"));
  Trained plain = make_setup(path, 1);
  Trained checkpointed = make_setup(path, 1, /*checkpoint=*/true);
  Trained threaded = make_setup(path, 2);
  const MicroBatch batch = random_batch(3, 9, plain.model->config().n_vocab, 5);
  auto a = plain.graph->accumulate(batch, 0);
  auto b = checkpointed.graph->accumulate(batch, 0);
  auto c = threaded.graph->accumulate(batch, 0);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->loss, b->loss);
  EXPECT_EQ(a->loss, c->loss);
  const std::vector<float> ga = all_grads(*plain.params);
  EXPECT_EQ(ga, all_grads(*checkpointed.params));
  EXPECT_EQ(ga, all_grads(*threaded.params));
  EXPECT_GT(*std::max_element(ga.begin(), ga.end()), 0.0f);
}

}  // namespace
}  // namespace graft

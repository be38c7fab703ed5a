// Train and serve agree: for the same model, adapter and tokens, the
// trainer's loss of each target token equals -log p of that token as the
// inference engine computes it (Forward with the adapter mounted, then the
// sampler's logprobs), on an F32 base.
#include <gtest/gtest.h>

#include <numeric>

#include "adapters/lora_adapter.h"
#include "adapters/targets.h"
#include "engine/forward.h"
#include "engine/kv_cache.h"
#include "engine/sampler.h"
#include "train/config.h"
#include "train/fixtures.h"
#include "train/lora_params.h"
#include "train/train_graph.h"

namespace graft {
namespace {

void check_agreement(const std::string& arch) {
  const std::string path = testing::test_model_path(testing::gradient_spec(arch, "f32"));
  auto model = Model::load(path);  // the F32 adapter mounts as F32: adapters keep their type
  ASSERT_TRUE(model) << model.error().message;
  const ModelConfig& c = (*model)->config();
  std::vector<int> layers(size_t(c.n_layer));
  std::iota(layers.begin(), layers.end(), 0);
  auto params = LoraParams::create(c, 8, layers, {kTrainTargets.begin(), kTrainTargets.end()});
  ASSERT_TRUE(params);
  (*params)->init(5);
  // A trained adapter has B != 0: give it values.
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (const LoraParams::Pair& p : (*params)->pairs()) {
    auto* b = static_cast<float*>(p.b->data);
    for (int64_t i = 0; i < ggml_nelements(p.b); ++i) b[i] = normal(rng);
  }
  const float scale = 1.5f;

  // Two sequences of different lengths in one padded micro-batch.
  const std::vector<std::vector<int32_t>> seqs = {{1, 17, 42, 99, 3, 250, 7, 8, 9, 100, 5},
                                                  {2, 200, 31, 64, 128, 77}};
  MicroBatch batch;
  batch.n_seqs = 2;
  batch.seq_len = 11;
  batch.tokens.assign(22, 0);
  for (int s = 0; s < 2; ++s) {
    std::copy(seqs[size_t(s)].begin(), seqs[size_t(s)].end(), batch.tokens.begin() + s * 11);
    for (size_t i = 0; i + 1 < seqs[size_t(s)].size(); ++i) {
      batch.loss_rows.push_back(s * 11 + int(i));
      batch.labels.push_back(seqs[size_t(s)][i + 1]);
      batch.weights.push_back(1.0f);
    }
  }
  TrainGraphOptions options;
  options.lora_scale = scale;
  options.n_threads = 1;
  std::vector<double> trained;
  {
    TrainGraph graph(**model, **params, options);
    auto losses = graph.evaluate(batch);
    ASSERT_TRUE(losses) << losses.error().message;
    trained = losses->loss;
  }

  // The engine, with the same adapter mounted from its PEFT-shaped form.
  LoraAdapter adapter = (*params)->to_adapter(scale);
  auto slot = (*model)->mount_lora(to_mountable(std::move(adapter)));
  ASSERT_TRUE(slot) << slot.error().message;
  KvCacheOptions kv;
  kv.n_cells = 64;
  kv.n_seq_max = 2;
  auto cache = KvCache::create(c, kv);
  ASSERT_TRUE(cache);
  Forward forward(**model, **cache, 1);
  AdapterRoute route;
  route.n = 1;
  route.slot[0] = *slot;
  route.scale[0] = 1.0f;
  size_t k = 0;
  double worst = 0.0;
  for (int s = 0; s < 2; ++s) {
    Batch b;
    const std::vector<int32_t>& seq = seqs[size_t(s)];
    for (size_t i = 0; i < seq.size(); ++i) b.rows.push_back({seq[i], int(i), s, true, route});
    auto logits = forward.run(b);
    ASSERT_TRUE(logits) << logits.error().message;
    for (size_t i = 0; i + 1 < seq.size(); ++i, ++k) {
      const double served = -compute_logprobs(logits->row(int(i)), c.n_vocab, seq[i + 1], 0).chosen.logprob;
      worst = std::max(worst, std::abs(served - trained[k]));
      EXPECT_NEAR(trained[k], served, 1e-4) << arch << " sequence " << s << " token " << i + 1;
    }
  }
  std::printf("%s: worst |loss - (-log p)| = %.2e over %zu tokens\n", arch.c_str(), worst, k);
}

TEST(TrainServeAgreement, LlamaLossIsServedNegativeLogprob) {
  check_agreement("llama");
}
TEST(TrainServeAgreement, Qwen3LossIsServedNegativeLogprob) {
  check_agreement("qwen3");
}

}  // namespace
}  // namespace graft

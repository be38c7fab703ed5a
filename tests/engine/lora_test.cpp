// LoRA through the one linear helper: the delta matches merged dense weights,
// and a batch mixing rows with no adapter, adapter a, adapter b and a+b gives
// each row what it gets alone.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "engine/generate.h"
#include "model/gguf_rewrite.h"
#include "testing/address_space_limit.h"
#include "testing/test_models.h"

namespace graft {
namespace {

LoraPair random_pair(int layer, LoraTarget target, int rank, int n_in, int n_out, uint32_t seed, float size,
                     ggml_type type = GGML_TYPE_F32) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, size);
  LoraPair p;
  p.layer = layer;
  p.target = target;
  p.rank = rank;
  std::vector<float> a(size_t(rank) * size_t(n_in)), b(size_t(n_out) * size_t(rank));
  for (float& x : a) x = normal(rng);
  for (float& x : b) x = normal(rng);
  p.a = LoraMatrix::of_floats(std::move(a), type);
  p.b = LoraMatrix::of_floats(std::move(b), type);
  return p;
}

// An adapter on every projection of every layer, its matrices stored as `type`.
LoraWeights random_adapter(const ModelConfig& c, int rank, uint32_t seed, ggml_type type = GGML_TYPE_F16,
                           float size = 0.3f) {
  LoraWeights w;
  w.scale = 2.0f / float(rank);
  for (int l = 0; l < c.n_layer; ++l) {
    for (int t = 0; t < kLoraTargetCount; ++t) {
      const LoraTarget target = LoraTarget(t);
      if (!lora_target_exists(c, l, target)) continue;
      w.pairs.push_back(random_pair(l, target, rank, lora_n_in(c, l, target), lora_n_out(c, l, target),
                                    seed + uint32_t(1 + t + 20 * l), size, type));
    }
  }
  return w;
}

AdapterRoute route(std::initializer_list<std::pair<int, float>> adapters) {
  AdapterRoute r;
  for (const auto& [slot, scale] : adapters) {
    r.slot[r.n] = slot;
    r.scale[r.n] = scale;
    ++r.n;
  }
  return r;
}

float max_abs(const std::vector<float>& v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

const std::vector<TokenId> kPrompt = {128000, 791, 4062, 14198, 39935, 35308, 927};

TEST(Lora, DeltaMatchesDenseMergedWeights) {
  const std::string base = testing::test_model_path(testing::tiny_spec("llama", "llama-bpe", "f32"));
  auto e = testing::open_engine(base, 256, 2);
  ASSERT_TRUE(e.forward);
  const ModelConfig& c = e.model->config();

  LoraWeights w;
  w.scale = 0.5f;
  w.pairs.push_back(random_pair(0, LoraTarget::attn_q, 4, c.n_embd, c.n_embd_q(), 11, 0.3f));
  w.pairs.push_back(random_pair(1, LoraTarget::ffn_down, 4, c.n_ff, c.n_embd, 12, 0.3f));
  auto slot = e.model->mount_lora(w);
  ASSERT_TRUE(slot.ok()) << slot.error().message;
  const float route_scale = 0.8f;
  std::vector<std::vector<float>> with_lora, without;
  testing::greedy(e, kPrompt, 4, 0, &with_lora, route({{*slot, route_scale}}));
  testing::greedy(e, kPrompt, 4, 1, &without);

  // The same model with W + route_scale * scale * B A written into the file.
  const std::string merged = testing::scratch_dir() + "/merged.gguf";
  testing::GgufEdits edits;
  edits.edit_f32 = [&](const std::string& name, std::vector<float>& values) {
    for (const LoraPair& p : w.pairs) {
      if (name != "blk." + std::to_string(p.layer) + "." + lora_target_name(p.target) + ".weight") continue;
      const std::vector<float> pa = p.a.floats(), pb = p.b.floats();
      const size_t n_in = pa.size() / size_t(p.rank), n_out = pb.size() / size_t(p.rank);
      for (size_t o = 0; o < n_out; ++o) {
        for (size_t i = 0; i < n_in; ++i) {
          double d = 0.0;
          for (int r = 0; r < p.rank; ++r)
            d += double(pb[o * size_t(p.rank) + size_t(r)]) * pa[size_t(r) * n_in + i];
          values[o * n_in + i] += float(route_scale * w.scale * d);
        }
      }
    }
  };
  ASSERT_TRUE(testing::rewrite_gguf(base, merged, edits).ok());
  auto m = testing::open_engine(merged, 256, 1);
  ASSERT_TRUE(m.forward);
  std::vector<std::vector<float>> dense;
  testing::greedy(m, kPrompt, 4, 0, &dense);

  ASSERT_EQ(dense.size(), with_lora.size());
  for (size_t step = 0; step < dense.size(); ++step) {
    EXPECT_LE(max_diff(dense[step], with_lora[step]), 1e-4f * max_abs(dense[step])) << "step " << step;
  }
  // And the adapter does change the output (the comparison above can fail).
  EXPECT_GT(max_diff(without[0], with_lora[0]), 1e-2f * max_abs(without[0]));
}

// Adapters of every type, alone and stacked across types, in one batch.
void expect_mixed_batch_gives_each_row_what_it_gets_alone(const TestModelSpec& spec) {
  const std::string base = testing::test_model_path(spec);
  auto e = testing::open_engine(base, 1024, 8);
  ASSERT_TRUE(e.forward);
  const ModelConfig& c = e.model->config();
  auto a = e.model->mount_lora(random_adapter(c, 4, 100, GGML_TYPE_F16));
  auto b = e.model->mount_lora(random_adapter(c, 8, 200, GGML_TYPE_F16));  // a larger rank: re-padded
  auto d = e.model->mount_lora(random_adapter(c, 8, 300, GGML_TYPE_BF16));
  auto f = e.model->mount_lora(random_adapter(c, 6, 400, GGML_TYPE_F32));
  ASSERT_TRUE(a.ok() && b.ok() && d.ok() && f.ok());
  EXPECT_EQ(e.model->lora().place(*d).type, LoraType::bf16);
  EXPECT_EQ(e.model->lora().place(*f).type, LoraType::f32);
  const std::vector<AdapterRoute> routes = {route({}),           route({{*a, 1.0f}}),
                                            route({{*b, 0.7f}}), route({{*a, 0.5f}, {*b, 1.0f}}),
                                            route({{*f, 1.0f}}), route({{*f, 0.5f}, {*a, 1.0f}, {*d, 0.8f}})};
  // BF16 rounds A's input to 8 bits, which magnifies the last-bit differences
  // that batching makes upstream (another matmul kernel for more rows).
  const std::vector<float> tolerance = {1e-3f, 1e-3f, 1e-3f, 1e-3f, 1e-3f, 1e-2f};
  constexpr int kSteps = 6;

  // All in one batch per step.
  std::vector<std::vector<TokenId>> together(routes.size());
  std::vector<std::vector<std::vector<float>>> together_logits(routes.size());
  Batch batch;
  for (size_t s = 0; s < routes.size(); ++s) {
    for (size_t i = 0; i < kPrompt.size(); ++i) {
      batch.rows.push_back({kPrompt[i], int(i), SeqId(s), i + 1 == kPrompt.size(), routes[s]});
    }
  }
  for (int step = 0; step < kSteps; ++step) {
    auto r = e.forward->run(batch);
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_EQ(r->n_rows, int(routes.size()));
    batch.clear();
    for (size_t s = 0; s < routes.size(); ++s) {
      const TokenId t = argmax(r->row(int(s)), r->n_vocab);
      together[s].push_back(t);
      together_logits[s].emplace_back(r->row(int(s)), r->row(int(s)) + r->n_vocab);
      batch.rows.push_back({t, e.cache->seq_length(SeqId(s)), SeqId(s), true, routes[s]});
    }
  }
  // Each alone.
  for (size_t s = 0; s < routes.size(); ++s) {
    std::vector<std::vector<float>> logits;
    e.cache->seq_free(SeqId(s));
    const auto alone = testing::greedy(e, kPrompt, kSteps, SeqId(s), &logits, routes[s]);
    EXPECT_EQ(together[s], alone) << "route " << s;
    for (size_t step = 0; step < logits.size(); ++step) {
      EXPECT_LE(max_diff(logits[step], together_logits[s][step]), tolerance[s] * max_abs(logits[step]))
          << "route " << s << " step " << step;
    }
  }
  // The routes really differ from each other.
  for (size_t s = 1; s < routes.size(); ++s) EXPECT_NE(together[s - 1], together[s]) << "route " << s;
}

// F32 and BF16 adapters keep their values: one whose B is scaled by 2^20 (far
// beyond F16's range) with its scale divided by 2^20 gives bit for bit what
// the unscaled one gives. (Rounded to F16, the scaled B was infinite.)
TEST(Lora, F32AndBf16AdaptersKeepTheirRangeAndPrecision) {
  const std::string base = testing::test_model_path(testing::tiny_spec("llama", "llama-bpe", "f16"));
  auto e = testing::open_engine(base, 512, 4);
  ASSERT_TRUE(e.forward);
  const ModelConfig& c = e.model->config();
  const float kBig = 1048576.0f;  // 2^20: scales every value exactly
  for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_BF16}) {
    const LoraWeights plain = random_adapter(c, 8, 500, type);
    LoraWeights big;
    big.scale = plain.scale / kBig;
    for (const LoraPair& p : plain.pairs) {
      LoraPair q = p;
      std::vector<float> b = p.b.floats();
      for (float& x : b) x *= kBig;
      q.b = LoraMatrix::of_floats(std::move(b), type);
      big.pairs.push_back(std::move(q));
    }
    auto s_plain = e.model->mount_lora(plain);
    auto s_big = e.model->mount_lora(big);
    ASSERT_TRUE(s_plain.ok() && s_big.ok());
    EXPECT_EQ(ggml_type_of(e.model->lora().place(*s_big).type), type);
    std::vector<std::vector<float>> want, got, without;
    e.cache->clear();
    testing::greedy(e, kPrompt, 2, 0, &want, route({{*s_plain, 1.0f}}));
    testing::greedy(e, kPrompt, 2, 1, &got, route({{*s_big, 1.0f}}));
    testing::greedy(e, kPrompt, 1, 2, &without);
    ASSERT_EQ(want.size(), got.size());
    for (size_t step = 0; step < want.size(); ++step) {
      for (size_t i = 0; i < want[step].size(); ++i) {
        ASSERT_TRUE(std::isfinite(got[step][i]))
            << ggml_type_name(type) << " step " << step << " logit " << i;
        ASSERT_EQ(want[step][i], got[step][i]) << ggml_type_name(type) << " step " << step << " logit " << i;
      }
    }
    EXPECT_GT(max_diff(without[0], want[0]), 1e-2f * max_abs(without[0])) << "the adapter changes the output";
    ASSERT_TRUE(e.model->unmount_lora(*s_plain).ok());
    ASSERT_TRUE(e.model->unmount_lora(*s_big).ok());
  }
}

TEST(Lora, MixedBatchGivesEachRowWhatItGetsAlone) {
  expect_mixed_batch_gives_each_row_what_it_gets_alone(testing::tiny_spec("llama", "llama-bpe", "f16"));
}

// qwen35: adapters on the linear-attention projections too, rows of each
// sequence reading their own recurrent state.
TEST(Lora, MixedBatchOnAHybridModel) {
  expect_mixed_batch_gives_each_row_what_it_gets_alone(testing::tiny_qwen35_spec("llama-bpe", "f16"));
}

// gemma4: projections of two widths (local and global heads, normal and
// double-wide FFNs), no k or v ones in the shared-KV layers, and the
// per-layer-input gate and projection of every layer.
TEST(Lora, MixedBatchOnGemma4) {
  expect_mixed_batch_gives_each_row_what_it_gets_alone(testing::tiny_gemma4_spec("llama-bpe", "f16"));
}

TEST(Lora, AHybridLayerTakesOnlyItsOwnProjections) {
  auto model = Model::load(testing::test_model_path(testing::tiny_qwen35_spec("llama-bpe", "f16")));
  ASSERT_TRUE(model.ok());
  const ModelConfig& c = (*model)->config();
  LoraWeights wrong;
  wrong.pairs.push_back(random_pair(0, LoraTarget::attn_q, 4, c.n_embd, c.n_embd_q_proj(), 1, 0.1f));
  auto r = (*model)->mount_lora(wrong);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("layer 0 of the model has no attn_q"), std::string::npos)
      << r.error().message;
  LoraWeights right;
  const int n_in = lora_n_in(c, 0, LoraTarget::ssm_out), n_out = lora_n_out(c, 0, LoraTarget::ssm_out);
  right.pairs.push_back(random_pair(0, LoraTarget::ssm_out, 4, n_in, n_out, 1, 0.1f));
  right.pairs.push_back(random_pair(3, LoraTarget::attn_q, 4, c.n_embd, c.n_embd_q_proj(), 2, 0.1f));
  EXPECT_TRUE((*model)->mount_lora(right).ok());
}

TEST(Lora, MountChecksShapesAndUnmountFreesTheSlot) {
  auto model = Model::load(testing::test_model_path(testing::tiny_spec("llama", "llama-bpe", "f16")));
  ASSERT_TRUE(model.ok());
  const ModelConfig& c = (*model)->config();
  LoraWeights bad;
  bad.pairs.push_back(
      random_pair(0, LoraTarget::ffn_down, 4, c.n_embd, c.n_embd, 1, 0.1f));  // n_in must be n_ff
  auto r = (*model)->mount_lora(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("blk.0.ffn_down: lora_a has 512 values, expected rank 4 x 256"),
            std::string::npos)
      << r.error().message;
  LoraWeights far;
  far.pairs.push_back(random_pair(7, LoraTarget::attn_q, 4, c.n_embd, c.n_embd_q(), 1, 0.1f));
  r = (*model)->mount_lora(far);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("layer 7"), std::string::npos) << r.error().message;
  EXPECT_FALSE((*model)->mount_lora(LoraWeights{}).ok());

  auto first = (*model)->mount_lora(random_adapter(c, 4, 1));
  auto second = (*model)->mount_lora(random_adapter(c, 4, 2));
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_NE(*first, *second);
  EXPECT_EQ((*model)->lora().n_mounted(), 2);
  EXPECT_TRUE((*model)->unmount_lora(*first).ok());
  EXPECT_FALSE((*model)->unmount_lora(*first).ok());
  EXPECT_FALSE((*model)->lora().mounted(*first));
  auto third = (*model)->mount_lora(random_adapter(c, 4, 3));
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(*third, *first);  // the freed slot is reused
}

// Memory for an adapter's stacks that cannot be reserved: the mount fails
// with "out_of_memory" saying how much, the adapters already mounted keep
// working, and the same adapter mounts once memory allows.
TEST(Lora, MountWithoutMemoryFailsCleanly) {
  const std::string base = testing::test_model_path(testing::tiny_spec("llama", "llama-bpe", "f16"));
  auto e = testing::open_engine(base, 512, 2);
  ASSERT_TRUE(e.forward);
  const ModelConfig& c = e.model->config();
  auto a = e.model->mount_lora(random_adapter(c, 4, 100, GGML_TYPE_F16));
  ASSERT_TRUE(a.ok());
  const std::vector<TokenId> before = testing::greedy(e, kPrompt, 4, 0, nullptr, route({{*a, 1.0f}}));
  const LoraWeights f32 = random_adapter(c, 4, 200, GGML_TYPE_F32);  // the first F32 adapter: new stacks
  {
    testing::AddressSpaceLimit limit(size_t(1) << 20);
    auto refused = e.model->mount_lora(f32);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.error().code, "out_of_memory");
    EXPECT_NE(refused.error().message.find("MiB for 32 LoRA adapters of type f32"), std::string::npos)
        << refused.error().message;
  }
  EXPECT_EQ(e.model->lora().n_mounted(), 1);
  e.cache->clear();
  EXPECT_EQ(testing::greedy(e, kPrompt, 4, 0, nullptr, route({{*a, 1.0f}})), before);
  auto f = e.model->mount_lora(f32);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(e.model->lora().place(*f).type, LoraType::f32);
}

}  // namespace
}  // namespace graft

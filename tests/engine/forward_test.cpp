#include <gtest/gtest.h>

#include "engine/generate.h"
#include "model/gguf_rewrite.h"
#include "testing/address_space_limit.h"
#include "testing/test_models.h"

namespace graft {
namespace {

using testing::greedy;
using testing::open_engine;

TEST(Forward, GreedyContinuationIsDeterministicAndInVocabulary) {
  auto e = open_engine(testing::test_model_path(testing::tiny_spec("llama", "llama-bpe", "f16")));
  ASSERT_TRUE(e.forward);
  std::vector<TokenId> prompt = {128000, 791, 4062, 14198, 39935};
  auto first = greedy(e, prompt, 16, 0);
  auto second = greedy(e, prompt, 16, 1);
  ASSERT_EQ(first.size(), 16u);
  EXPECT_EQ(first, second);
  for (TokenId t : first) EXPECT_LT(t, e.model->config().n_vocab);
}

// A compute buffer that cannot be allocated fails the batch with a clear
// error, leaves the cache as it was, and smaller batches run afterwards.
TEST(Forward, ComputeMemoryThatCannotBeAllocatedFailsOnlyThatBatch) {
  auto e = open_engine(testing::test_model_path(testing::tiny_spec("llama", "llama-bpe", "f16")), 512, 2);
  ASSERT_TRUE(e.forward);
  Batch big;  // 300 rows of logits: 300 x 128256 floats, ~147 MiB
  for (int i = 0; i < 300; ++i) big.rows.push_back({TokenId(1000 + i), i, 0, true, {}});
  {
    testing::AddressSpaceLimit limit(size_t(64) << 20);
    auto reserved = e.forward->reserve(256, 256);
    ASSERT_FALSE(reserved.ok());
    EXPECT_EQ(reserved.error().code, "out_of_memory");
    EXPECT_NE(reserved.error().message.find("MiB of compute memory for a batch of 256 rows"),
              std::string::npos)
        << reserved.error().message;
    auto run = e.forward->run(big);
    ASSERT_FALSE(run.ok());
    EXPECT_EQ(run.error().code, "out_of_memory") << run.error().message;
  }
  EXPECT_EQ(e.cache->seq_length(0), 0);
  EXPECT_EQ(e.cache->cells_used(), 0);
  // The same forward then runs what fits, and the big batch too once memory allows.
  const std::vector<TokenId> prompt = {128000, 791, 4062, 14198, 39935};
  EXPECT_EQ(greedy(e, prompt, 4, 1).size(), 4u);
  auto run = e.forward->run(big);
  ASSERT_TRUE(run.ok()) << run.error().message;
  EXPECT_EQ(run->n_rows, 300);
}

}  // namespace
}  // namespace graft

namespace graft {
namespace {

// Every architecture and weight type runs (qwen2 also has q/k/v biases; the
// biases change the output, so they are used).
TEST(Forward, EveryArchitectureAndWeightTypeGenerates) {
  const std::vector<std::string> all = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q4_k", "q5_k", "q6_k"};
  const std::vector<std::string> some = {"f16", "q4_k"};
  for (const std::string arch : {"llama", "qwen2", "qwen3"}) {
    for (const std::string& type : arch == "llama" ? all : some) {
      TestModelSpec spec = testing::tiny_spec(arch, "llama-spm", type);
      spec.n_embd = 256;
      spec.n_ff = 512;
      auto e = testing::open_engine(testing::test_model_path(spec), 256, 1);
      ASSERT_TRUE(e.forward) << arch << " " << type;
      EXPECT_EQ(testing::greedy(e, {1, 450, 4996, 17354}, 4).size(), 4u) << arch << " " << type;
    }
  }
}

TEST(Forward, Qwen2BiasesChangeTheOutput) {
  TestModelSpec spec = testing::tiny_spec("qwen2", "llama-spm", "f32");
  const std::string path = testing::test_model_path(spec);
  const std::string unbiased = testing::scratch_dir() + "/qwen2-no-bias.gguf";
  testing::GgufEdits edits;
  edits.edit_f32 = [](const std::string& name, std::vector<float>& values) {
    if (name.find(".bias") != std::string::npos) std::fill(values.begin(), values.end(), 0.0f);
  };
  ASSERT_TRUE(testing::rewrite_gguf(path, unbiased, edits).ok());
  auto a = testing::open_engine(path, 256, 1);
  auto b = testing::open_engine(unbiased, 256, 1);
  std::vector<std::vector<float>> la, lb;
  testing::greedy(a, {1, 450, 4996}, 1, 0, &la);
  testing::greedy(b, {1, 450, 4996}, 1, 0, &lb);
  ASSERT_EQ(la.size(), 1u);
  ASSERT_EQ(lb.size(), 1u);
  EXPECT_NE(la[0], lb[0]);
}

}  // namespace
}  // namespace graft

#include <gtest/gtest.h>

#include "engine/generate.h"
#include "model/gguf_rewrite.h"
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

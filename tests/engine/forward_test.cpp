#include <gtest/gtest.h>

#include "engine/generate.h"
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

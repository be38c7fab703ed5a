// Adapters on qwen35 (Qwen3.5) models: the linear-attention projections as
// targets, and PEFT adapters, whose value heads Hugging Face orders grouped
// by key head, read into GGUF's tiled order.
#include <gtest/gtest.h>

#include "adapters/store.h"
#include "fixtures.h"

namespace graft {
namespace {

using testing::error_of;
using testing::make_adapter;

std::string hybrid_base() {
  return testing::test_model_path(testing::tiny_qwen35_spec("llama-spm", "f16"));  // 2 key, 4 value heads
}

TEST(Qwen35Adapters, EveryLayerGetsTheProjectionsItHas) {
  const BaseModel& base = testing::base_info(hybrid_base());
  ASSERT_EQ(base.ssm_k_heads, 2);
  ASSERT_EQ(base.ssm_v_heads, 4);
  const LoraAdapter all = make_adapter(testing::tiny_adapter_spec(hybrid_base()));
  // Three linear-attention layers of 5 + 3 projections, one attention layer of 4 + 3.
  EXPECT_EQ(all.pairs.size(), 3u * 8u + 7u);

  auto targets = test_adapter_targets("attn", base);
  ASSERT_TRUE(targets.ok());
  EXPECT_EQ(targets->size(), 9u);
  TestAdapterSpec q = testing::tiny_adapter_spec(hybrid_base());
  q.targets = {LoraTarget::attn_q};
  const LoraAdapter only_q = make_adapter(q);
  ASSERT_EQ(only_q.pairs.size(), 1u);
  EXPECT_EQ(only_q.pairs[0].layer, 3);

  // A llama model has no linear attention: asking for it is an error.
  TestAdapterSpec qkv = testing::tiny_adapter_spec(testing::tiny_base());
  qkv.targets = {LoraTarget::attn_qkv};
  auto refused = make_test_adapter(qkv, testing::base_info(testing::tiny_base()));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(error_of(refused).find("the base model has no blk.0.attn_qkv.weight"), std::string::npos);
}

TEST(Qwen35Adapters, ValueHeadsMoveBetweenPeftAndGgufOrder) {
  const BaseModel& base = testing::base_info(hybrid_base());
  LoraAdapter adapter;
  LoraPair beta;  // lora_B of in_proj_b: one row per value head, rank 1
  beta.layer = 0;
  beta.target = LoraTarget::ssm_beta;
  beta.rank = 1;
  beta.a = LoraMatrix::of_floats(std::vector<float>(128, 0.5f));
  beta.b =
      LoraMatrix::of_floats({10, 11, 20, 21});  // Hugging Face: key head 0's value heads, then key head 1's
  adapter.pairs.push_back(beta);
  LoraAdapter moved = adapter;
  reorder_value_heads(moved, base, HeadOrder::peft_to_gguf);
  EXPECT_EQ(moved.pairs[0].b.floats(),
            (std::vector<float>{10, 20, 11, 21}));  // tiled: each key head's first, then second
  EXPECT_EQ(moved.pairs[0].a.floats(), adapter.pairs[0].a.floats());
  reorder_value_heads(moved, base, HeadOrder::gguf_to_peft);
  EXPECT_EQ(moved.pairs[0].b.floats(), adapter.pairs[0].b.floats());

  // Every reordered projection comes back as it was.
  const LoraAdapter all = make_adapter(testing::tiny_adapter_spec(hybrid_base()));
  LoraAdapter round = all;
  reorder_value_heads(round, base, HeadOrder::gguf_to_peft);
  for (size_t i = 0; i < all.pairs.size(); ++i) {
    if (all.pairs[i].layer == 0 && all.pairs[i].target == LoraTarget::attn_qkv) {
      EXPECT_NE(round.pairs[i].b.floats(), all.pairs[i].b.floats());  // its v rows moved
    }
  }
  reorder_value_heads(round, base, HeadOrder::peft_to_gguf);
  for (size_t i = 0; i < all.pairs.size(); ++i) {
    EXPECT_EQ(round.pairs[i].a.floats(), all.pairs[i].a.floats()) << i;
    EXPECT_EQ(round.pairs[i].b.floats(), all.pairs[i].b.floats()) << i;
  }
}

TEST(Qwen35Adapters, APeftAdapterMountsAsItsGgufForm) {
  const BaseModel& base = testing::base_info(hybrid_base());
  const LoraAdapter adapter = make_adapter(testing::tiny_adapter_spec(hybrid_base()));
  const fs::path root = testing::fresh_dir("qwen35-forms");
  LoraAdapter peft = adapter;
  reorder_value_heads(peft, base, HeadOrder::gguf_to_peft);
  testing::write_peft_or_fail(root / "p", peft);
  testing::write_gguf_or_fail(root / "g.gguf", adapter, {"qwen35", "", "f32"});
  auto p = inspect_adapter(root / "p");
  auto g = inspect_adapter(root / "g.gguf");
  ASSERT_TRUE(p.ok() && g.ok()) << error_of(p) << error_of(g);
  auto from_peft = read_mountable(*p, base);
  auto from_gguf = read_mountable(*g, base);
  ASSERT_TRUE(from_peft.ok()) << error_of(from_peft);
  ASSERT_TRUE(from_gguf.ok()) << error_of(from_gguf);
  ASSERT_EQ(from_peft->pairs.size(), from_gguf->pairs.size());
  for (size_t i = 0; i < from_gguf->pairs.size(); ++i) {
    const LoraPair& a = from_peft->pairs[i];
    const LoraPair& b = from_gguf->pairs[i];
    ASSERT_EQ(a.target, b.target);
    EXPECT_EQ(a.a.floats(), b.a.floats()) << "pair " << i;
    EXPECT_EQ(a.b.floats(), b.b.floats()) << "pair " << i;
  }
}

}  // namespace
}  // namespace graft

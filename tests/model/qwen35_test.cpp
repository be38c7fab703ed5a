// Loading qwen35 (Qwen3.5) models: the layer pattern, the gated delta net's
// sizes and tensors, and clear errors for what graft cannot run.
#include <gtest/gtest.h>

#include "model/gguf_rewrite.h"
#include "model/model.h"
#include "testing/test_models.h"

namespace graft {
namespace {

using testing::GgufEdits;
using testing::rewrite_gguf;

std::string hybrid(const std::string& type = "f16") {
  return testing::test_model_path(testing::tiny_qwen35_spec("llama-spm", type));
}

std::string load_error(const std::string& name, const GgufEdits& edits) {
  const std::string to = testing::scratch_dir() + "/" + name + ".gguf";
  EXPECT_TRUE(rewrite_gguf(hybrid(), to, edits).ok());
  auto model = Model::load(to);
  EXPECT_FALSE(model.ok());
  return model.ok() ? std::string() : model.error().message;
}

TEST(Qwen35Load, ReadsTheHybridLayout) {
  auto model = Model::load(hybrid());
  ASSERT_TRUE(model.ok()) << model.error().message;
  const ModelConfig& c = (*model)->config();
  EXPECT_EQ(c.arch, "qwen35");
  EXPECT_EQ(c.n_recurrent_layers(), 3);
  EXPECT_FALSE(c.is_recurrent(3));
  EXPECT_TRUE(c.attn_gate);
  EXPECT_EQ(c.n_embd_q_proj(), 2 * 4 * 32);
  EXPECT_EQ(c.ssm.n_k_heads, 2);
  EXPECT_EQ(c.ssm.head_dim, 16);
  EXPECT_EQ(c.ssm.conv_dim(), 2 * 32 + 64);
  EXPECT_EQ(c.rope.mode, GGML_ROPE_TYPE_NEOX);
  const LayerWeights& linear = (*model)->weights().layers[0];
  const LayerWeights& full = (*model)->weights().layers[3];
  EXPECT_NE(linear.ssm_conv, nullptr);
  EXPECT_EQ(linear.wq, nullptr);
  EXPECT_NE(full.wq, nullptr);
  EXPECT_EQ(full.ssm_qkv, nullptr);
  EXPECT_EQ(linear.ssm_conv->type, GGML_TYPE_F32);  // the convolution stays f32 in quantized files too
}

TEST(Qwen35Load, EveryWeightTypeLoads) {
  for (const std::string type : {"q8_0", "q4_0"}) {
    auto model = Model::load(hybrid(type));
    EXPECT_TRUE(model.ok()) << type << ": " << (model.ok() ? "" : model.error().message);
  }
}

TEST(Qwen35Load, AnExplicitLayerListWins) {
  GgufEdits edits;
  edits.set_keys = [](gguf_context* ctx) {
    const bool flags[4] = {true, false, true, true};
    gguf_set_arr_data(ctx, "qwen35.attention.recurrent_layers", GGUF_TYPE_BOOL, flags, 4);
  };
  // The file's tensors follow the interval; with the list, layer 1 is attention and lacks them.
  EXPECT_NE(load_error("qwen35-layer-list", edits).find("missing tensor 'blk.1.attn_q.weight'"),
            std::string::npos);
}

TEST(Qwen35LoadErrors, MissingOrBadKeysAreNamed) {
  GgufEdits missing;
  missing.drop_keys = {"qwen35.ssm.conv_kernel"};
  EXPECT_NE(load_error("qwen35-no-conv", missing).find("qwen35.ssm.conv_kernel"), std::string::npos);

  GgufEdits inner;
  inner.set_keys = [](gguf_context* ctx) { gguf_set_val_u32(ctx, "qwen35.ssm.inner_size", 48); };
  EXPECT_NE(load_error("qwen35-inner", inner).find("inner_size 48 is not time_step_rank 4 x state_size 16"),
            std::string::npos);

  GgufEdits sections;
  sections.set_keys = [](gguf_context* ctx) {
    const int32_t s[4] = {2, 1, 0, 0};  // the third pair of each three would read the fourth axis
    gguf_set_arr_data(ctx, "qwen35.rope.dimension_sections", GGUF_TYPE_INT32, s, 4);
  };
  EXPECT_NE(load_error("qwen35-sections", sections).find("leave rotated pair 2 to the fourth axis"),
            std::string::npos);

  GgufEdits conv;
  conv.drop_tensors = {"blk.2.ssm_conv1d.weight"};
  EXPECT_NE(load_error("qwen35-no-conv-tensor", conv).find("missing tensor 'blk.2.ssm_conv1d.weight'"),
            std::string::npos);
}

}  // namespace
}  // namespace graft

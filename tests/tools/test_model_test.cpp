#include <gtest/gtest.h>

#include <filesystem>

#include "io/gguf_file.h"
#include "testing/test_models.h"
#include "tools/test_model.h"
#include "util/files.h"

namespace graft {
namespace {

TEST(TestModel, MetadataAndShapesReadBackAsRequested) {
  TestModelSpec spec = testing::tiny_spec("qwen3", "qwen2", "q8_0");
  spec.n_embd = 256;
  spec.n_layer = 3;
  spec.n_head = 8;
  spec.n_head_kv = 2;
  spec.head_dim = 64;
  spec.n_ff = 512;
  std::string path = testing::scratch_dir() + "/shapes.gguf";
  ASSERT_TRUE(write_test_model(spec, path).ok());

  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok()) << file.error().message;
  EXPECT_EQ(*file->get_string("general.architecture"), "qwen3");
  EXPECT_EQ(*file->get_int("qwen3.embedding_length"), 256);
  EXPECT_EQ(*file->get_int("qwen3.block_count"), 3);
  EXPECT_EQ(*file->get_int("qwen3.attention.head_count"), 8);
  EXPECT_EQ(*file->get_int("qwen3.attention.head_count_kv"), 2);
  EXPECT_EQ(*file->get_int("qwen3.attention.key_length"), 64);
  EXPECT_EQ(*file->get_int("qwen3.feed_forward_length"), 512);
  EXPECT_EQ(*file->get_string("tokenizer.ggml.pre"), "qwen2");

  auto vocab = GgufFile::open(testing::bundle_vocab("qwen2"));
  ASSERT_TRUE(vocab.ok());
  const int64_t n_vocab = int64_t(vocab->get_string_array("tokenizer.ggml.tokens")->size());

  auto embd = file->tensor("token_embd.weight");
  ASSERT_TRUE(embd.ok());
  EXPECT_EQ((*embd)->type, GGML_TYPE_Q8_0);
  EXPECT_EQ((*embd)->ne[0], 256);
  EXPECT_EQ((*embd)->ne[1], n_vocab);
  auto q = file->tensor("blk.2.attn_q.weight");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ((*q)->ne[0], 256);
  EXPECT_EQ((*q)->ne[1], 8 * 64);
  auto k = file->tensor("blk.2.attn_k.weight");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ((*k)->ne[1], 2 * 64);
  auto qn = file->tensor("blk.0.attn_q_norm.weight");
  ASSERT_TRUE(qn.ok());
  EXPECT_EQ((*qn)->type, GGML_TYPE_F32);
  EXPECT_EQ((*qn)->ne[0], 64);
  auto down = file->tensor("blk.1.ffn_down.weight");
  ASSERT_TRUE(down.ok());
  EXPECT_EQ((*down)->ne[0], 512);
  EXPECT_EQ((*down)->ne[1], 256);
  EXPECT_TRUE(file->find_tensor("output.weight") != nullptr);
  EXPECT_EQ(file->find_tensor("blk.3.attn_q.weight"), nullptr);
}

TEST(TestModel, SameSeedWritesTheSameBytes) {
  TestModelSpec spec = testing::tiny_spec("llama", "llama-bpe", "q4_0");
  std::string a = testing::scratch_dir() + "/seed-a.gguf";
  std::string b = testing::scratch_dir() + "/seed-b.gguf";
  ASSERT_TRUE(write_test_model(spec, a).ok());
  ASSERT_TRUE(write_test_model(spec, b).ok());
  EXPECT_EQ(*read_file(a), *read_file(b));
  spec.seed = 43;
  ASSERT_TRUE(write_test_model(spec, b).ok());
  EXPECT_NE(*read_file(a), *read_file(b));
}

TEST(TestModel, TiedOutputHasNoOutputTensor) {
  TestModelSpec spec = testing::tiny_spec();
  spec.tied_output = true;
  auto file = GgufFile::open(testing::test_model_path(spec));
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->find_tensor("output.weight"), nullptr);
}

TEST(TestModel, Qwen2HasAttentionBiases) {
  auto file = GgufFile::open(testing::test_model_path(testing::tiny_spec("qwen2", "qwen2")));
  ASSERT_TRUE(file.ok());
  EXPECT_NE(file->find_tensor("blk.0.attn_q.bias"), nullptr);
  EXPECT_NE(file->find_tensor("blk.1.attn_v.bias"), nullptr);
}

TEST(TestModel, BadSpecsAreRejectedWithReasons) {
  TestModelSpec spec = testing::tiny_spec();
  spec.arch = "gpt5";
  auto status = write_test_model(spec, testing::scratch_dir() + "/bad.gguf");
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message.find("gpt5"), std::string::npos);

  spec = testing::tiny_spec();
  spec.n_head_kv = 3;
  EXPECT_FALSE(write_test_model(spec, testing::scratch_dir() + "/bad.gguf").ok());

  spec = testing::tiny_spec("llama", "llama-bpe", "q4_0");
  spec.n_embd = 100;  // not a multiple of the q4_0 block
  spec.n_head = 4;
  status = write_test_model(spec, testing::scratch_dir() + "/bad.gguf");
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message.find("multiples of 32"), std::string::npos);

  spec = testing::tiny_spec();
  spec.vocab_path = "/nonexistent/vocab.gguf";
  EXPECT_FALSE(write_test_model(spec, testing::scratch_dir() + "/bad.gguf").ok());
  EXPECT_FALSE(std::filesystem::exists(testing::scratch_dir() + "/bad.gguf"));
}

}  // namespace
}  // namespace graft

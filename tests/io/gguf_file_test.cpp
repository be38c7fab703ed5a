#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "io/gguf_file.h"
#include "io/mmap.h"
#include "testing/test_models.h"
#include "util/files.h"

namespace graft {
namespace {

TEST(GgufFile, ReadsTheBundleVocabulary) {
  auto file = GgufFile::open(testing::bundle_vocab("llama-bpe"));
  ASSERT_TRUE(file.ok()) << file.error().message;
  EXPECT_EQ(*file->get_string("tokenizer.ggml.model"), "gpt2");
  auto tokens = file->get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  EXPECT_GT(tokens->size(), 100000u);
}

TEST(GgufFile, MissingAndMistypedKeysNameTheKey) {
  auto file = GgufFile::open(testing::bundle_vocab("llama-bpe"));
  ASSERT_TRUE(file.ok());
  auto missing = file->get_int("llama.no_such_key");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("llama.no_such_key"), std::string::npos);
  auto mistyped = file->get_int("tokenizer.ggml.model");
  ASSERT_FALSE(mistyped.ok());
  EXPECT_NE(mistyped.error().message.find("not an integer"), std::string::npos);
  EXPECT_FALSE(file->find_int("tokenizer.ggml.model").has_value());
}

TEST(GgufFile, TruncatedFileIsRejected) {
  std::string model = testing::test_model_path(testing::tiny_spec());
  auto bytes = read_file(model);
  ASSERT_TRUE(bytes.ok());
  std::string cut = testing::scratch_dir() + "/truncated.gguf";
  ASSERT_TRUE(write_file_atomic(cut, std::string_view(*bytes).substr(0, bytes->size() - 1000)).ok());
  auto file = GgufFile::open(cut);
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.error().message.find("truncated"), std::string::npos);

  ASSERT_TRUE(write_file_atomic(cut, std::string_view(*bytes).substr(0, 100)).ok());
  EXPECT_FALSE(GgufFile::open(cut).ok());
}

TEST(GgufFile, NotAGgufFileIsRejected) {
  std::string path = testing::scratch_dir() + "/not.gguf";
  ASSERT_TRUE(write_file_atomic(path, "hello, this is not a model").ok());
  auto file = GgufFile::open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.error().code, "invalid_file");
  EXPECT_FALSE(GgufFile::open(testing::scratch_dir() + "/missing.gguf").ok());
}

TEST(MappedFile, MapsTheWholeFile) {
  std::string path = testing::scratch_dir() + "/map.bin";
  ASSERT_TRUE(write_file_atomic(path, "0123456789").ok());
  auto map = MappedFile::open(path);
  ASSERT_TRUE(map.ok());
  ASSERT_EQ(map->size(), 10u);
  EXPECT_EQ(map->data()[3], '3');
}

}  // namespace
}  // namespace graft

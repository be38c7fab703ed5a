// Bad and huge input: invalid UTF-8, a 10 MB text, a 1 MB word without
// spaces, NUL bytes. Tokenizing must finish with correct ids (checked by the
// round trip), never crash or hang (ctest's timeout would catch a hang).
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/bundle_vocabs.h"
#include "tokenizer/tokenizer.h"
#include "util/files.h"
#include "util/utf8.h"

namespace graft {
namespace {

std::string mixed_text() {
  auto text = read_file(std::string(GRAFT_SOURCE_DIR) + "/bench/data/mixed.txt");
  EXPECT_TRUE(text.ok());
  return text.ok() ? *text : std::string();
}

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

class Robustness : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto tok = testing::load_bundle_tokenizer(GetParam());
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    tok_ = *tok;
  }
  std::vector<TokenId> encode(std::string_view text) {
    auto ids = tok_->encode(text, false, false);
    EXPECT_TRUE(ids.ok()) << ids.error().message;
    return ids.ok() ? *ids : std::vector<TokenId>{};
  }
  std::shared_ptr<const Tokenizer> tok_;
};

TEST_P(Robustness, InvalidUtf8ComesBackWithReplacementCharacters) {
  const std::vector<std::string> inputs = {"\xFF",
                                           "abc\x80"
                                           "def",
                                           "\xE2\x82",
                                           "\xE2\x82"
                                           "x",
                                           "\xF0\x9F\xA6",
                                           "\xC0\xAF overlong",
                                           "\xED\xA0\x80 surrogate",
                                           "\xF4\x90\x80\x80 too big",
                                           "\xF8\x88\x80\x80\x80",
                                           random_bytes(4096, 7),
                                           std::string("a\0b", 3)};
  for (const std::string& input : inputs) {
    const std::vector<TokenId> ids = encode(input);
    const std::string back = tok_->decode(ids);
    ASSERT_TRUE(utf8::is_valid(back));
    // Every byte that is not part of a character reads as one U+FFFD.
    EXPECT_EQ(back, utf8::repair(input)) << escape_piece(input.substr(0, 64));
  }
}

TEST_P(Robustness, TenMegabytesOfMixedText) {
  const std::string unit = mixed_text();
  std::string big;
  big.reserve(10'000'000 + unit.size());
  while (big.size() < 10'000'000) big += unit;
  const std::vector<TokenId> ids = encode(big);
  EXPECT_GT(ids.size(), big.size() / 8);
  EXPECT_LT(ids.size(), big.size());
  EXPECT_TRUE(tok_->decode(ids) == big);
  // Repeating a text repeats its tokens (the cache replays what it saw).
  const std::vector<TokenId> once = encode(unit + unit);
  EXPECT_EQ(std::vector<TokenId>(ids.begin(), ids.begin() + once.size()), once);
}

TEST_P(Robustness, OneMegabyteWordWithoutSpaces) {
  std::mt19937 rng(42);
  std::string word(1'000'000, 'a');
  for (char& c : word) c = static_cast<char>('a' + rng() % 26);
  const std::vector<TokenId> ids = encode(word);
  EXPECT_GT(ids.size(), word.size() / 10);
  EXPECT_TRUE(tok_->decode(ids) == word);
  const std::string same(1'000'000, 'x');
  EXPECT_TRUE(tok_->decode(encode(same)) == same);
}

TEST_P(Robustness, EmptyText) {
  EXPECT_TRUE(encode("").empty());
  auto with_special = tok_->encode("", true, true);
  ASSERT_TRUE(with_special.ok());
  EXPECT_EQ(with_special->size(), tok_->add_bos() ? 1u : 0u);
  EXPECT_EQ(tok_->decode({}), "");
}

TEST_P(Robustness, OutOfRangeIdsDecodeToNothing) {
  EXPECT_EQ(tok_->decode({-5, tok_->n_vocab(), 1 << 30}), "");
  EXPECT_EQ(tok_->token_bytes(-1), "");
  EXPECT_EQ(tok_->token_text(tok_->n_vocab()), "");
  StreamDecoder decoder(tok_);
  EXPECT_EQ(decoder.push(-1), "");
}

INSTANTIATE_TEST_SUITE_P(Bundle, Robustness, ::testing::Values("llama-bpe", "qwen2", "llama-spm", "gemma-4"),
                         [](const auto& info) {
                           std::string id = info.param;
                           for (char& c : id) c = isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return id;
                         });

}  // namespace
}  // namespace graft

// Merge rules, fallbacks and flags on small hand-made vocabularies, where the
// right answer can be worked out by hand.
#include <gtest/gtest.h>

#include "tokenizer/tiny_vocab.h"
#include "tokenizer/tokenizer.h"

namespace graft {
namespace {

using testing::byte_level;
using testing::load_tiny_vocab;
using testing::TinyVocab;

std::vector<TokenId> encode(const Tokenizer& tok, std::string_view text) {
  auto ids = tok.encode(text, /*add_special=*/false, /*parse_special=*/false);
  EXPECT_TRUE(ids.ok()) << ids.error().message;
  return ids.ok() ? *ids : std::vector<TokenId>{};
}

// Tokens 0..3 are the letters; the rest follow the merges.
TinyVocab letters_vocab(std::vector<std::string> merges, std::vector<std::string> more_tokens) {
  TinyVocab v;
  v.tokens = {"a", "b", "c", byte_level(" ")};
  for (auto& t : more_tokens) v.tokens.push_back(t);
  v.merges = std::move(merges);
  return v;
}

TEST(TinyBpe, LowerRankMergesFirst) {
  // "b c" outranks "a b": abc -> a + bc, although "ab" is a token too.
  auto tok = load_tiny_vocab(letters_vocab({"b c", "a b"}, {"ab", "bc"}));
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  EXPECT_EQ(encode(**tok, "abc"), (std::vector<TokenId>{0, 5}));
  EXPECT_EQ(encode(**tok, "abab"), (std::vector<TokenId>{4, 4}));
}

TEST(TinyBpe, EqualRanksMergeLeftmostFirst) {
  auto tok = load_tiny_vocab(letters_vocab({"a a"}, {"aa"}));
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  EXPECT_EQ(encode(**tok, "aaa"), (std::vector<TokenId>{4, 0}));
  EXPECT_EQ(encode(**tok, "aaaaa"), (std::vector<TokenId>{4, 4, 0}));
}

// a, aa, a4, a8, ..., a64 by doubling merges.
TinyVocab doubling_vocab() {
  std::vector<std::string> merges, tokens;
  std::string unit = "a";
  for (int i = 0; i < 6; ++i) {
    merges.push_back(unit + " " + unit);
    unit += unit;
    tokens.push_back(unit);
  }
  return letters_vocab(merges, tokens);  // ids: aa=4, a4=5, a8=6, a16=7, a32=8, a64=9
}

TEST(TinyBpe, ShortAndLongWordsFollowTheSameRules) {
  auto tok = load_tiny_vocab(doubling_vocab());
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  // 40 = 32 + 8 (a word short enough for the scan merge loop).
  EXPECT_EQ(encode(**tok, std::string(40, 'a')), (std::vector<TokenId>{8, 6}));
  // 100 = 64 + 32 + 4 (the queue-driven loop).
  EXPECT_EQ(encode(**tok, std::string(100, 'a')), (std::vector<TokenId>{9, 8, 5}));
  // 1000 = 15 * 64 + 32 + 8.
  std::vector<TokenId> expected(15, 9);
  expected.push_back(8);
  expected.push_back(6);
  EXPECT_EQ(encode(**tok, std::string(1000, 'a')), expected);
}

TEST(TinyBpe, MergeStepsNeedNotBeTokens) {
  // "ab" is only an intermediate of the merges: abc still becomes one token,
  // a lone "ab" falls back to its letters.
  auto tok = load_tiny_vocab(letters_vocab({"a b", "ab c"}, {"abc"}));
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  EXPECT_EQ(encode(**tok, "abc"), (std::vector<TokenId>{4}));
  EXPECT_EQ(encode(**tok, "ab"), (std::vector<TokenId>{0, 1}));
}

TEST(TinyBpe, PreTokenizerKeepsWordsApart) {
  // "b Ġ" is the best merge, but gpt-2's pre-split makes "ab ab" the words
  // "ab" and " ab", so b and the space never meet.
  const std::string space = byte_level(" ");
  auto tok =
      load_tiny_vocab(letters_vocab({"b " + space, "a b", space + " ab"}, {"ab", space + "ab", "b" + space}));
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  EXPECT_EQ(encode(**tok, "ab ab"), (std::vector<TokenId>{4, 5}));
  EXPECT_EQ(encode(**tok, "b "), (std::vector<TokenId>{1, 3}));  // "b", " ": two words again
  EXPECT_EQ((*tok)->decode({4, 5}), "ab ab");
}

TEST(TinyBpe, AddSpecialFollowsTheFlags) {
  TinyVocab v = letters_vocab({}, {"<|bos|>", "<|eos|>"});
  v.types = {1, 1, 1, 1, 3, 3};
  v.ints = {{"tokenizer.ggml.bos_token_id", 4}, {"tokenizer.ggml.eos_token_id", 5}};
  v.bools = {{"tokenizer.ggml.add_bos_token", true}, {"tokenizer.ggml.add_eos_token", true}};
  auto tok = load_tiny_vocab(v);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  auto ids = (*tok)->encode("ab", /*add_special=*/true, /*parse_special=*/false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<TokenId>{4, 0, 1, 5}));
  EXPECT_EQ((*tok)->decode(*ids), "<|bos|>ab<|eos|>");
  EXPECT_EQ((*tok)->decode(*ids, /*skip_special=*/true), "ab");
  EXPECT_TRUE((*tok)->is_eog(5));
  EXPECT_FALSE((*tok)->is_eog(4));
  EXPECT_TRUE((*tok)->is_control(4));
}

TEST(TinyBpe, UserDefinedTokensAreAlwaysMatchedControlOnlyWhenAsked) {
  TinyVocab v = letters_vocab({}, {"<ctl>", "<usr>", "<", ">"});
  v.types = {1, 1, 1, 1, 3, 4, 1, 1};
  v.tokens.insert(v.tokens.end(), {"c", "t", "l", "u", "s", "r"});  // ids 8..13 (note "c" again: later wins)
  v.types.insert(v.types.end(), {1, 1, 1, 1, 1, 1});
  auto tok = load_tiny_vocab(v);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  auto plain = (*tok)->encode("a<ctl>b<usr>", false, /*parse_special=*/false);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*plain, (std::vector<TokenId>{0, 6, 8, 9, 10, 7, 1, 5}));
  auto parsed = (*tok)->encode("a<ctl>b<usr>", false, /*parse_special=*/true);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, (std::vector<TokenId>{0, 4, 1, 5}));
}

TEST(TinySentencePiece, SpacePrefixScoresAndByteFallback) {
  TinyVocab v;
  v.model = "llama";
  v.pre.reset();
  v.write_merges = false;
  v.tokens = {"<unk>", "<s>", "</s>", "▁", "a", "b", "▁a", "ab", "▁ab", "<0xC3>", "<0xA9>"};
  v.types = {2, 3, 3, 1, 1, 1, 1, 1, 1, 6, 6};
  // "▁a" outscores "ab": ▁ab is reached through ▁a.
  v.scores = {0, 0, 0, -1, -1, -1, -2, -3, -4, 0, 0};
  auto tok = load_tiny_vocab(v);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  EXPECT_TRUE((*tok)->add_bos());
  auto ids = (*tok)->encode("ab", /*add_special=*/true, false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<TokenId>{1, 8}));
  // "é" has no token: its two bytes become byte tokens.
  EXPECT_EQ(encode(**tok, "aé"), (std::vector<TokenId>{6, 9, 10}));
  EXPECT_EQ((*tok)->decode({6, 9, 10}), "aé");
  EXPECT_EQ((*tok)->decode({1, 6, 9, 10}, /*skip_special=*/true), "aé");
  EXPECT_EQ((*tok)->decode({1, 6, 9, 10}), "<s>aé");
  // A byte with no token at all becomes <unk>.
  EXPECT_EQ(encode(**tok, "ü").back(), 0);
}

TEST(TinySentencePieceBpe, SpacesBecomeMarksAndBytesFallBack) {
  TinyVocab v;
  v.model = "gemma4";
  v.pre.reset();
  v.tokens = {"<pad>", "<eos>", "<bos>", "a", "b", "▁", "▁a", "▁ab", "\n", "<0x0A>", "<0xC3>", "<0xA9>"};
  v.types = {3, 3, 3, 1, 1, 1, 1, 1, 1, 6, 6, 6};
  v.merges = {"▁ a", "▁a b"};
  v.ints = {{"tokenizer.ggml.bos_token_id", 2}, {"tokenizer.ggml.eos_token_id", 1}};
  auto tok = load_tiny_vocab(v);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  EXPECT_TRUE((*tok)->add_bos());  // always for this family
  EXPECT_EQ(encode(**tok, "b ab\n é"), (std::vector<TokenId>{4, 7, 8, 5, 10, 11}));
  EXPECT_EQ((*tok)->decode({4, 7, 8, 5, 10, 11}), "b ab\n é");
}

TEST(TinyVocabErrors, MissingModelKeyIsNamed) {
  TinyVocab v = letters_vocab({}, {});
  v.model.clear();
  auto tok = load_tiny_vocab(v);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.error().message.find("tokenizer.ggml.model"), std::string::npos) << tok.error().message;
}

TEST(TinyVocabErrors, MissingTokensKeyIsNamed) {
  TinyVocab v = letters_vocab({}, {});
  v.tokens.clear();
  auto tok = load_tiny_vocab(v);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.error().message.find("tokenizer.ggml.tokens"), std::string::npos) << tok.error().message;
}

TEST(TinyVocabErrors, MissingMergesKeyIsNamed) {
  TinyVocab v = letters_vocab({}, {});
  v.write_merges = false;
  auto tok = load_tiny_vocab(v);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.error().message.find("tokenizer.ggml.merges"), std::string::npos) << tok.error().message;
}

TEST(TinyVocabErrors, UnsupportedModelAndPreAreNamed) {
  TinyVocab bert = letters_vocab({}, {});
  bert.model = "bert";
  auto tok = load_tiny_vocab(bert);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.error().code, "unsupported");
  EXPECT_NE(tok.error().message.find("'bert'"), std::string::npos) << tok.error().message;

  TinyVocab odd = letters_vocab({}, {});
  odd.pre = "no-such-pre";
  tok = load_tiny_vocab(odd);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.error().code, "unsupported");
  EXPECT_NE(tok.error().message.find("'no-such-pre'"), std::string::npos) << tok.error().message;
}

TEST(TinyVocabErrors, ShortScoreAndTypeArraysAreRejected) {
  TinyVocab v = letters_vocab({}, {});
  v.types = {1, 1};
  auto tok = load_tiny_vocab(v);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.error().message.find("tokenizer.ggml.token_type"), std::string::npos) << tok.error().message;

  v.types.clear();
  v.scores = {0.0f};
  tok = load_tiny_vocab(v);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.error().message.find("tokenizer.ggml.scores"), std::string::npos) << tok.error().message;
}

TEST(TinyVocabErrors, MistypedKeyIsNamed) {
  TinyVocab v = letters_vocab({}, {});
  v.strings = {{"tokenizer.ggml.bos_token_id", "one"}};
  auto tok = load_tiny_vocab(v);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.error().message.find("tokenizer.ggml.bos_token_id"), std::string::npos)
      << tok.error().message;
}

TEST(TinyVocabErrors, OutOfRangeSpecialIdIsIgnored) {
  TinyVocab v = letters_vocab({}, {});
  v.ints = {{"tokenizer.ggml.eos_token_id", 9999}};
  auto tok = load_tiny_vocab(v);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  EXPECT_EQ((*tok)->eos(), -1);  // the family default (11) is outside this vocabulary too
  EXPECT_EQ((*tok)->bos(), -1);
}

}  // namespace
}  // namespace graft

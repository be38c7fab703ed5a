// Special tokens on real vocabularies: chat-template markers become single
// tokens only when asked, the longest marker wins, BOS follows the flags,
// and end-of-generation tokens are recognised.
#include <gtest/gtest.h>

#include <algorithm>

#include "tokenizer/bundle_vocabs.h"
#include "tokenizer/tokenizer.h"

namespace graft {
namespace {

std::shared_ptr<const Tokenizer> load(const std::string& name) {
  auto tok = testing::load_bundle_tokenizer(name);
  EXPECT_TRUE(tok.ok()) << (tok.ok() ? "" : tok.error().message);
  return tok.ok() ? *tok : nullptr;
}

TokenId id_of(const Tokenizer& tok, const std::string& text) {
  auto id = tok.find_token(text);
  EXPECT_TRUE(id.has_value()) << text;
  return id.value_or(-1);
}

bool contains(const std::vector<TokenId>& ids, TokenId id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

TEST(SpecialTokens, ChatMarkersAreSingleTokensOnlyWhenParsed) {
  auto tok = load("qwen2");
  ASSERT_TRUE(tok);
  const std::string text = "<|im_start|>user\nHi there<|im_end|>\n";
  const TokenId start = id_of(*tok, "<|im_start|>");
  const TokenId end = id_of(*tok, "<|im_end|>");
  auto parsed = tok->encode(text, false, /*parse_special=*/true);
  auto plain = tok->encode(text, false, /*parse_special=*/false);
  ASSERT_TRUE(parsed.ok() && plain.ok());
  EXPECT_EQ(parsed->front(), start);
  EXPECT_TRUE(contains(*parsed, end));
  EXPECT_FALSE(contains(*plain, start));
  EXPECT_FALSE(contains(*plain, end));
  EXPECT_GT(plain->size(), parsed->size());
  // Either way the text comes back.
  EXPECT_EQ(tok->decode(*parsed), text);
  EXPECT_EQ(tok->decode(*plain), text);
  // The text between markers is tokenized as if on its own.
  auto inner = tok->encode("user\nHi there", false, false);
  ASSERT_TRUE(inner.ok());
  EXPECT_TRUE(std::equal(inner->begin(), inner->end(), parsed->begin() + 1));
}

TEST(SpecialTokens, LongestMarkerWins) {
  auto tok = load("llama-bpe");
  ASSERT_TRUE(tok);
  auto ids = tok->encode("<|reserved_special_token_10|><|reserved_special_token_1|>", false, true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<TokenId>{id_of(*tok, "<|reserved_special_token_10|>"),
                                        id_of(*tok, "<|reserved_special_token_1|>")}));
}

TEST(SpecialTokens, BosFollowsTheVocabulary) {
  auto llama3 = load("llama-bpe");
  auto gpt2 = load("gpt-2");
  ASSERT_TRUE(llama3 && gpt2);
  auto with = llama3->encode("Hello", /*add_special=*/true, false);
  auto without = llama3->encode("Hello", /*add_special=*/false, false);
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_TRUE(llama3->add_bos());
  EXPECT_EQ(with->front(), llama3->bos());
  EXPECT_EQ(with->size(), without->size() + 1);
  EXPECT_EQ(llama3->token_text(llama3->bos()), "<|begin_of_text|>");
  EXPECT_FALSE(gpt2->add_bos());
  auto g = gpt2->encode("Hello", true, false);
  ASSERT_TRUE(g.ok());
  EXPECT_NE(g->front(), gpt2->bos());
}

TEST(SpecialTokens, EndOfGenerationTokens) {
  struct Expect {
    std::string vocab;
    std::vector<std::string> eog;
    std::vector<std::string> not_eog;
  };
  const std::vector<Expect> cases = {
      {"llama-bpe", {"<|end_of_text|>", "<|eot_id|>"}, {"<|begin_of_text|>", "<|start_header_id|>"}},
      {"qwen2", {"<|endoftext|>", "<|im_end|>"}, {"<|im_start|>"}},
      {"phi-3", {"<|endoftext|>", "<|end|>"}, {"<|user|>", "<s>"}},
      {"gemma-4", {"<eos>", "<turn|>"}, {"<|turn>", "<bos>"}},
      {"llama-spm", {"</s>"}, {"<s>", "<unk>"}},
  };
  for (const auto& c : cases) {
    auto tok = load(c.vocab);
    ASSERT_TRUE(tok);
    for (const auto& text : c.eog) EXPECT_TRUE(tok->is_eog(id_of(*tok, text))) << c.vocab << " " << text;
    for (const auto& text : c.not_eog) EXPECT_FALSE(tok->is_eog(id_of(*tok, text))) << c.vocab << " " << text;
    EXPECT_TRUE(tok->is_eog(tok->eos())) << c.vocab;
    const auto all = tok->eog_tokens();
    EXPECT_TRUE(std::is_sorted(all.begin(), all.end()));
    for (TokenId id : all) EXPECT_TRUE(tok->is_control(id)) << c.vocab << " " << tok->token_text(id);
  }
}

TEST(SpecialTokens, SentencePieceSpacePrefixAfterSpecialTokens) {
  auto tok = load("llama-spm");
  ASSERT_TRUE(tok);
  // Text after a special token starts a new piece of text: it gets the space
  // prefix again, as at the start.
  auto a = tok->encode("<s>Hello", false, /*parse_special=*/true);
  auto b = tok->encode("Hello", false, false);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), b->size() + 1);
  EXPECT_EQ(a->front(), tok->bos());
  EXPECT_TRUE(std::equal(b->begin(), b->end(), a->begin() + 1));
  EXPECT_EQ(tok->decode(*a), "<s>Hello");
}

TEST(SpecialTokens, Phi3SwallowsWhitespaceAfterChatMarkers) {
  auto tok = load("phi-3");
  ASSERT_TRUE(tok);
  auto spaced = tok->encode("<|user|>  \n Hi<|end|>", true, true);
  auto tight = tok->encode("<|user|>Hi<|end|>", true, true);
  ASSERT_TRUE(spaced.ok() && tight.ok());
  EXPECT_EQ(*spaced, *tight);
  // Markers that are not chat markers keep the whitespace around them.
  auto s1 = tok->encode("<s> Hi", false, true);
  auto s2 = tok->encode("<s>Hi", false, true);
  ASSERT_TRUE(s1.ok() && s2.ok());
  EXPECT_NE(*s1, *s2);
}

TEST(SpecialTokens, SkipSpecialDropsControlTokensOnly) {
  auto tok = load("llama-bpe");
  ASSERT_TRUE(tok);
  auto ids = tok->encode("<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", true, true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(tok->decode(*ids, /*skip_special=*/true), "user\n\nHi");
  EXPECT_EQ(tok->decode(*ids), "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

}  // namespace
}  // namespace graft

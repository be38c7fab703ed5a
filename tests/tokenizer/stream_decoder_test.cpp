// The streaming detokenizer: only complete UTF-8 comes out, characters cut
// across tokens wait, bad bytes become U+FFFD, and the pieces add up to the
// whole-sequence decode.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/bundle_vocabs.h"
#include "tokenizer/tokenizer.h"
#include "util/utf8.h"

namespace graft {
namespace {

std::shared_ptr<const Tokenizer> load(const std::string& name) {
  auto tok = testing::load_bundle_tokenizer(name);
  EXPECT_TRUE(tok.ok()) << (tok.ok() ? "" : tok.error().message);
  return tok.ok() ? *tok : nullptr;
}

// The byte-level token that stands for one raw byte.
TokenId byte_token(const Tokenizer& tok, uint8_t byte) {
  for (TokenId id = 0; id < tok.n_vocab(); ++id) {
    if (tok.token_bytes(id) == std::string(1, static_cast<char>(byte))) return id;
  }
  ADD_FAILURE() << "no token for byte " << int(byte);
  return -1;
}

std::string stream(const std::shared_ptr<const Tokenizer>& tok, const std::vector<TokenId>& ids,
                   std::vector<std::string>* pieces = nullptr, bool skip_special = false,
                   bool strip = false) {
  StreamDecoder decoder(tok, skip_special, strip);
  std::string all;
  for (TokenId id : ids) {
    std::string piece = decoder.push(id);
    EXPECT_TRUE(utf8::is_valid(piece)) << escape_piece(piece);
    if (pieces) pieces->push_back(piece);
    all += piece;
  }
  std::string rest = decoder.flush();
  EXPECT_TRUE(utf8::is_valid(rest));
  if (pieces) pieces->push_back(rest);
  return all + rest;
}

TEST(StreamDecoder, HoldsACharacterCutAcrossTokensUntilItIsComplete) {
  auto tok = load("llama-bpe");
  ASSERT_TRUE(tok);
  auto ids = tok->encode("🦙!", false, false);  // the llama emoji is three tokens of raw bytes
  ASSERT_TRUE(ids.ok());
  ASSERT_GE(ids->size(), 3u);
  std::vector<std::string> pieces;
  EXPECT_EQ(stream(tok, *ids, &pieces), "🦙!");
  // Nothing comes out until the last byte of the emoji arrives.
  size_t first_text = 0;
  while (first_text < pieces.size() && pieces[first_text].empty()) ++first_text;
  EXPECT_GE(first_text, 1u);
  EXPECT_EQ(pieces[first_text].substr(0, 4), "🦙");
}

TEST(StreamDecoder, ByteByByteEmitsEachCharacterWhenComplete) {
  auto tok = load("llama-bpe");
  ASSERT_TRUE(tok);
  const std::string text = "aé中🦙z";
  std::vector<TokenId> ids;
  for (char c : text) ids.push_back(byte_token(*tok, static_cast<uint8_t>(c)));
  std::vector<std::string> pieces;
  EXPECT_EQ(stream(tok, ids, &pieces), text);
  const std::vector<std::string> expected = {"a", "", "é", "", "", "中", "", "", "", "🦙", "z", ""};
  EXPECT_EQ(pieces, expected);
}

TEST(StreamDecoder, InvalidBytesBecomeReplacementCharactersAtOnce) {
  auto tok = load("llama-bpe");
  ASSERT_TRUE(tok);
  const TokenId ff = byte_token(*tok, 0xFF);
  const TokenId e2 = byte_token(*tok, 0xE2);
  const TokenId a = byte_token(*tok, 'a');
  StreamDecoder decoder(tok);
  EXPECT_EQ(decoder.push(ff), "\xEF\xBF\xBD");  // 0xFF never starts a character
  EXPECT_EQ(decoder.push(e2), "");              // could still become a character
  EXPECT_EQ(decoder.push(a),
            "\xEF\xBF\xBD"
            "a");  // ... but 'a' cannot continue it
  EXPECT_EQ(decoder.push(e2), "");
  EXPECT_EQ(decoder.flush(), "\xEF\xBF\xBD");  // cut short at the end
  EXPECT_EQ(tok->decode({ff, e2, a, e2}),
            "\xEF\xBF\xBD\xEF\xBF\xBD"
            "a\xEF\xBF\xBD");
}

TEST(StreamDecoder, SentencePieceByteTokensAndLeadingSpace) {
  auto tok = load("llama-spm");
  ASSERT_TRUE(tok);
  auto ids = tok->encode("Hello 🦙 wörld", /*add_special=*/true, false);
  ASSERT_TRUE(ids.ok());
  // As a continuation (the default) the first word keeps its space; as the
  // start of a text it matches decode().
  EXPECT_EQ(stream(tok, *ids, nullptr, /*skip_special=*/true), " Hello 🦙 wörld");
  EXPECT_EQ(stream(tok, *ids, nullptr, /*skip_special=*/true, /*strip=*/true), "Hello 🦙 wörld");
  EXPECT_EQ(tok->decode(*ids, /*skip_special=*/true), "Hello 🦙 wörld");
  const TokenId lead = *tok->find_token("<0xF0>");
  StreamDecoder decoder(tok);
  EXPECT_EQ(decoder.push(lead), "");
  EXPECT_EQ(decoder.push(*tok->find_token("<0x9F>")), "");
  EXPECT_EQ(decoder.push(*tok->find_token("▁a")), "\xEF\xBF\xBD\xEF\xBF\xBD a");
}

TEST(StreamDecoder, SkipsControlTokensWhenAsked) {
  auto tok = load("qwen2");
  ASSERT_TRUE(tok);
  auto ids = tok->encode("<|im_start|>assistant\nHi!<|im_end|>", false, /*parse_special=*/true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(stream(tok, *ids, nullptr, /*skip_special=*/true), "assistant\nHi!");
  EXPECT_EQ(stream(tok, *ids), "<|im_start|>assistant\nHi!<|im_end|>");
}

// Random token sequences, special and byte tokens included: streaming always
// yields valid UTF-8 equal to the whole-sequence decode.
class StreamDecoderRandom : public ::testing::TestWithParam<std::string> {};

TEST_P(StreamDecoderRandom, EqualsWholeDecode) {
  auto tok = load(GetParam());
  ASSERT_TRUE(tok);
  std::mt19937 rng(1234);
  std::uniform_int_distribution<TokenId> any(0, tok->n_vocab() - 1);
  for (int round = 0; round < 200; ++round) {
    std::vector<TokenId> ids(1 + rng() % 40);
    for (TokenId& id : ids) id = any(rng);
    for (bool skip : {false, true}) {
      const std::string whole = tok->decode(ids, skip);
      ASSERT_TRUE(utf8::is_valid(whole));
      EXPECT_EQ(stream(tok, ids, nullptr, skip, /*strip=*/true), whole);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Bundle, StreamDecoderRandom, ::testing::Values("llama-bpe", "llama-spm", "gemma-4"),
                         [](const auto& info) {
                           std::string id = info.param;
                           for (char& c : id) c = isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return id;
                         });

}  // namespace
}  // namespace graft

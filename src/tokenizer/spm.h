// SentencePiece (tokenizer.ggml.model "llama"): characters merge pairwise,
// the pair whose merged text is the highest-scoring token first; characters
// left without a token become <0xXX> byte tokens. Internal to the layer.
#pragma once

#include <array>
#include <string_view>
#include <vector>

#include "tokenizer/merge.h"
#include "tokenizer/space_words.h"
#include "tokenizer/vocab.h"

namespace graft {

struct SpmScratch {
  std::vector<MergeSymbol> symbols;
  MergeScratch merge;
};

class SpmModel {
 public:
  explicit SpmModel(const Vocab& vocab);

  // Appends the tokens of `word`: text with spaces written as U+2581, cut by
  // for_each_space_word with space_joiners() (or whole). A byte that is not
  // part of a well-formed character stays a character of its own and ends
  // up a byte token, so invalid UTF-8 survives as the bytes it was.
  void encode_word(const Vocab& vocab, std::string_view word, SpmScratch& scratch,
                   std::vector<TokenId>& out) const;

  // Where a text may be cut into words.
  const SpaceJoiners& space_joiners() const { return joiners_; }

 private:
  MergeTable pairs_;  // (token, token) -> the token their texts make together
  SpaceJoiners joiners_;
  std::array<TokenId, 128> ascii_ids_{};
  std::array<TokenId, 256> byte_ids_{};  // <0xXX>, else the one-byte token, else unk
};

}  // namespace graft

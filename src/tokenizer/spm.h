// SentencePiece (tokenizer.ggml.model "llama"): characters merge pairwise,
// the pair whose merged text is the highest-scoring token first; characters
// left without a token become <0xXX> byte tokens. Internal to the layer.
#pragma once

#include <array>
#include <string_view>
#include <vector>

#include "tokenizer/merge.h"
#include "tokenizer/vocab.h"

namespace graft {

struct SpmScratch {
  std::vector<MergeSymbol> symbols;
  MergeScratch<float> merge;
};

class SpmModel {
 public:
  explicit SpmModel(const Vocab& vocab);

  // Appends the tokens of `text` (spaces already written as U+2581). Bytes
  // are split into characters by their lead byte, as SentencePiece does, so
  // invalid UTF-8 survives as byte tokens.
  void encode(const Vocab& vocab, std::string_view text, SpmScratch& scratch,
              std::vector<TokenId>& out) const;

  // True when no token spans a U+2581 that follows another character: the
  // text can then be merged one word at a time.
  bool splits_at_spaces() const { return splits_at_spaces_; }

 private:
  void encode_word(const Vocab& vocab, std::string_view word, SpmScratch& scratch,
                   std::vector<TokenId>& out) const;

  bool splits_at_spaces_ = true;
  std::array<TokenId, 128> ascii_ids_{};
  std::array<TokenId, 256> byte_ids_{};  // <0xXX>, else the one-byte token, else unk
};

}  // namespace graft

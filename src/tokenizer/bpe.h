// Ranked-merge BPE over one pre-split word. Byte-level vocabularies (GPT-2
// style) merge bytes, the others (Gemma 4) merge UTF-8 characters and fall
// back to <0xXX> byte tokens. Merges are looked up by the pair of token ids.
// Internal to the tokenizer layer.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/merge.h"
#include "tokenizer/space_words.h"
#include "tokenizer/string_map.h"
#include "tokenizer/vocab.h"
#include "util/result.h"

namespace graft {

struct BpeScratch {
  std::vector<MergeSymbol> symbols;
  MergeScratch merge;
  std::string text;
};

class BpeModel {
 public:
  static Result<BpeModel> create(const Vocab& vocab, bool whole_newline_words);

  // Appends the tokens of `word` (a pre-split piece of valid UTF-8; for
  // SentencePiece-style vocabularies, spaces already written as U+2581).
  void encode_word(const Vocab& vocab, std::string_view word, BpeScratch& scratch,
                   std::vector<TokenId>& out) const;

  // Where words may be cut before merging (SentencePiece-style vocabularies).
  const SpaceJoiners& space_joiners() const { return joiners_; }

 private:
  int32_t unit_id(const Vocab& vocab, std::string_view unit) const;
  int32_t id_of_string(const Vocab& vocab,
                       std::string_view text) const;  // vocab or merge-only id, -1 if neither
  void emit_fallback(std::string_view bytes, std::vector<TokenId>& out) const;

  bool byte_level_ = true;
  bool whole_newline_words_ = false;
  SpaceJoiners joiners_;
  int32_t n_vocab_ = 0;
  MergeTable merges_;
  StringMap merge_only_ids_;              // strings in merges that are not tokens, ids from n_vocab
  std::array<int32_t, 256> byte_unit_{};  // byte-level: id of each byte's character; else ASCII ids
  std::array<std::array<int32_t, 2>, 256> fallback_{};  // tokens for a byte no merge covers (-1: none)
};

}  // namespace graft

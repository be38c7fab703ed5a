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
#include "tokenizer/vocab.h"
#include "util/result.h"

namespace graft {

// Open-addressing map from a pair of ids to (rank, merged id); built once.
class MergeTable {
 public:
  struct Entry {
    uint64_t key;
    int32_t rank;
    int32_t result;
  };
  void build(std::vector<Entry> entries);  // earlier entries win for repeated pairs
  const Entry* find(int32_t left, int32_t right) const {
    const uint64_t key = pack(left, right);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return count_; }
  static uint64_t pack(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  size_t slot(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
  }
  std::vector<Entry> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t count_ = 0;
};

struct BpeScratch {
  std::vector<MergeSymbol> symbols;
  MergeScratch<int32_t> merge;
  std::string text;
};

class BpeModel {
 public:
  static Result<BpeModel> create(const Vocab& vocab, bool whole_newline_words);

  // Appends the tokens of `word` (a pre-split piece of valid UTF-8; for
  // SentencePiece-style vocabularies, spaces already written as U+2581).
  void encode_word(const Vocab& vocab, std::string_view word, BpeScratch& scratch,
                   std::vector<TokenId>& out) const;

  // True when no token spans a U+2581 that follows another character, so
  // words may be merged one at a time (SentencePiece-style vocabularies).
  bool splits_at_spaces() const { return splits_at_spaces_; }
  size_t merge_count() const { return merges_.size(); }

 private:
  int32_t unit_id(const Vocab& vocab, std::string_view unit) const;
  int32_t id_of_string(const Vocab& vocab,
                       std::string_view text) const;  // vocab or merge-only id, -1 if neither
  void emit_fallback(std::string_view bytes, std::vector<TokenId>& out) const;

  bool byte_level_ = true;
  bool whole_newline_words_ = false;
  bool splits_at_spaces_ = false;
  int32_t n_vocab_ = 0;
  MergeTable merges_;
  TextToId merge_only_ids_;               // strings in merges that are not tokens, ids from n_vocab
  std::array<int32_t, 256> byte_unit_{};  // byte-level: id of each byte's character; else ASCII ids
  std::array<std::array<int32_t, 2>, 256> fallback_{};  // tokens for a byte no merge covers (-1: none)
};

}  // namespace graft

#include "tokenizer/spm.h"

#include <fmt/format.h>

#include "tokenizer/space_words.h"

namespace graft {

SpmModel::SpmModel(const Vocab& vocab) {
  for (const std::string& text : vocab.texts) {
    if (joins_word_before_space(text)) {
      splits_at_spaces_ = false;
      break;
    }
  }
  for (int c = 0; c < 128; ++c) ascii_ids_[c] = vocab.find(std::string(1, static_cast<char>(c))).value_or(-1);
  for (int b = 0; b < 256; ++b) {
    auto id = vocab.find(fmt::format("<0x{:02X}>", b));
    if (!id) id = vocab.find(std::string(1, static_cast<char>(b)));
    byte_ids_[b] = id.value_or(vocab.unk);
  }
}

void SpmModel::encode(const Vocab& vocab, std::string_view text, SpmScratch& scratch,
                      std::vector<TokenId>& out) const {
  if (splits_at_spaces_) {
    for_each_space_word(text, [&](std::string_view word) { encode_word(vocab, word, scratch, out); });
  } else {
    encode_word(vocab, text, scratch, out);
  }
}

void SpmModel::encode_word(const Vocab& vocab, std::string_view word, SpmScratch& scratch,
                           std::vector<TokenId>& out) const {
  if (word.empty()) return;
  auto& symbols = scratch.symbols;
  make_chain(
      word.size(), symbols, [&](size_t i) { return utf8::length_from_lead(static_cast<uint8_t>(word[i])); },
      [&](size_t i, size_t len) -> int32_t {
        if (len == 1 && static_cast<uint8_t>(word[i]) < 0x80)
          return ascii_ids_[static_cast<uint8_t>(word[i])];
        return vocab.find(word.substr(i, len)).value_or(-1);
      });

  auto pair = [&](const MergeSymbol& l, const MergeSymbol& r) -> std::optional<MergeStep<float>> {
    auto id = vocab.find(word.substr(l.start, l.length + r.length));
    if (!id) return std::nullopt;
    return MergeStep<float>{-vocab.scores[*id], *id};
  };
  run_merges(symbols, pair, scratch.merge);

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const MergeSymbol& s = symbols[i];
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    for (uint32_t k = 0; k < s.length; ++k) {
      const TokenId id = byte_ids_[static_cast<uint8_t>(word[s.start + k])];
      if (id >= 0) out.push_back(id);
    }
  }
}

}  // namespace graft

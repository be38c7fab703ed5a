#include "tokenizer/spm.h"

#include <fmt/format.h>

namespace graft {

SpmModel::SpmModel(const Vocab& vocab) {
  // Every way a token's text splits into two tokens is a merge.
  std::vector<MergeTable::Entry> entries;
  for (TokenId id = 0; id < vocab.size(); ++id) {
    const std::string_view text = vocab.texts[id];
    joiners_.add_from(text);
    if (vocab.text_to_id.find(text) != id) continue;  // shadowed by a later duplicate
    for (size_t k = 1; k < text.size(); ++k) {
      const int32_t left = vocab.text_to_id.find(text.substr(0, k));
      if (left < 0) continue;
      const int32_t right = vocab.text_to_id.find(text.substr(k));
      if (right >= 0) entries.push_back({MergeTable::pack(left, right), 0, id});
    }
  }
  pairs_.build(std::move(entries));

  for (int c = 0; c < 128; ++c) ascii_ids_[c] = vocab.find(std::string(1, static_cast<char>(c))).value_or(-1);
  for (int b = 0; b < 256; ++b) {
    auto id = vocab.find(fmt::format("<0x{:02X}>", b));
    if (!id) id = vocab.find(std::string(1, static_cast<char>(b)));
    byte_ids_[b] = id.value_or(vocab.unk);
  }
}

void SpmModel::encode_word(const Vocab& vocab, std::string_view word, SpmScratch& scratch,
                           std::vector<TokenId>& out) const {
  if (word.empty()) return;
  auto& symbols = scratch.symbols;
  make_chain(
      word.size(), symbols, [&](size_t i) { return utf8::char_length(word, i); },
      [&](size_t i, size_t len) -> int32_t {
        if (len == 1 && static_cast<uint8_t>(word[i]) < 0x80)
          return ascii_ids_[static_cast<uint8_t>(word[i])];
        return vocab.text_to_id.find(word.substr(i, len));
      });

  auto pair = [&](const MergeSymbol& l, const MergeSymbol& r) -> std::optional<MergeStep> {
    int32_t merged;
    if (l.id >= 0 && r.id >= 0) {
      const MergeTable::Entry* e = pairs_.find(l.id, r.id);
      if (!e) return std::nullopt;
      merged = e->result;
    } else {
      merged = vocab.text_to_id.find(word.substr(l.start, l.length + r.length));
      if (merged < 0) return std::nullopt;
    }
    return MergeStep{float_order_key(-vocab.scores[merged]), merged};
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

#include "tokenizer/bpe.h"

#include <fmt/format.h>

#include <algorithm>

#include "tokenizer/byte_level.h"
#include "tokenizer/space_words.h"
#include "util/utf8.h"

namespace graft {

int32_t BpeModel::id_of_string(const Vocab& vocab, std::string_view text) const {
  if (auto id = vocab.find(text)) return *id;
  return merge_only_ids_.find(text);
}

Result<BpeModel> BpeModel::create(const Vocab& vocab, bool whole_newline_words) {
  BpeModel m;
  m.byte_level_ = vocab.kind == VocabKind::kByteLevelBpe;
  m.whole_newline_words_ = whole_newline_words;
  m.n_vocab_ = vocab.size();

  // Give every string of the merge list an id: its token id, or a fresh one.
  // The lookups are cache misses on a large table, so they go in batches:
  // hash and prefetch a batch first, then look it up.
  auto intern = [&](std::string_view text, uint64_t h) -> int32_t {
    const int32_t id = vocab.text_to_id.find(text, h);
    if (id >= 0) return id;
    return m.merge_only_ids_.insert(text, m.n_vocab_ + static_cast<int32_t>(m.merge_only_ids_.size()));
  };
  struct Parsed {
    std::string_view left, right;
    std::string joined;
    uint64_t h_left, h_right, h_joined;
  };
  constexpr size_t kBatch = 16;
  std::array<Parsed, kBatch> batch;
  std::vector<MergeTable::Entry> entries;
  entries.reserve(vocab.merges.size());
  for (size_t first = 0; first < vocab.merges.size(); first += kBatch) {
    const size_t count = std::min(kBatch, vocab.merges.size() - first);
    for (size_t k = 0; k < count; ++k) {
      const std::string& line = vocab.merges[first + k];
      const size_t space = line.find(' ', 1);
      Parsed& p = batch[k];
      if (space == std::string::npos) {  // not a pair; nothing can use it
        p.left = {};
        continue;
      }
      p.left = std::string_view(line.data(), space);
      p.right = std::string_view(line.data() + space + 1, line.size() - space - 1);
      p.joined.assign(p.left);
      p.joined.append(p.right);
      p.h_left = StringMap::hash(p.left);
      p.h_right = StringMap::hash(p.right);
      p.h_joined = StringMap::hash(p.joined);
      vocab.text_to_id.prefetch(p.h_left);
      vocab.text_to_id.prefetch(p.h_right);
      vocab.text_to_id.prefetch(p.h_joined);
    }
    for (size_t k = 0; k < count; ++k) {
      const Parsed& p = batch[k];
      if (p.left.empty()) continue;
      if (!m.byte_level_) m.joiners_.add_from(p.joined);
      const int32_t l = intern(p.left, p.h_left);
      const int32_t r = intern(p.right, p.h_right);
      const int32_t result = intern(p.joined, p.h_joined);
      entries.push_back({MergeTable::pack(l, r), static_cast<int32_t>(first + k), result});
    }
  }
  if (m.n_vocab_ + m.merge_only_ids_.size() > static_cast<size_t>(INT32_MAX)) {
    return errorf("invalid_file", "too many distinct strings in tokenizer.ggml.merges");
  }
  m.merges_.build(std::move(entries));

  for (int b = 0; b < 256; ++b) {
    std::string unit;
    if (m.byte_level_) {
      utf8::append_codepoint(unit, utf8::byte_to_codepoint(static_cast<uint8_t>(b)));
    } else if (b < 0x80) {
      unit.push_back(static_cast<char>(b));
    }
    m.byte_unit_[b] = unit.empty() ? -1 : m.id_of_string(vocab, unit);

    auto& fallback = m.fallback_[b];
    fallback = {-1, -1};
    if (m.byte_level_) {
      // Each byte of the encoded character, looked up on its own.
      for (size_t k = 0; k < unit.size() && k < 2; ++k)
        fallback[k] = vocab.find(unit.substr(k, 1)).value_or(-1);
    } else {
      fallback[0] = vocab.find(fmt::format("<0x{:02X}>", b)).value_or(-1);
    }
  }

  if (!m.byte_level_) {
    for (const std::string& text : vocab.texts) m.joiners_.add_from(text);
  }
  return m;
}

int32_t BpeModel::unit_id(const Vocab& vocab, std::string_view unit) const {
  if (unit.size() == 1 && static_cast<uint8_t>(unit[0]) < 0x80)
    return byte_unit_[static_cast<uint8_t>(unit[0])];
  return id_of_string(vocab, unit);
}

void BpeModel::emit_fallback(std::string_view bytes, std::vector<TokenId>& out) const {
  for (char c : bytes) {
    for (int32_t id : fallback_[static_cast<uint8_t>(c)]) {
      if (id >= 0) out.push_back(id);
    }
  }
}

void BpeModel::encode_word(const Vocab& vocab, std::string_view word, BpeScratch& scratch,
                           std::vector<TokenId>& out) const {
  if (word.empty()) return;
  if (vocab.ignore_merges) {
    std::string_view key = word;
    if (byte_level_) {
      scratch.text.clear();
      for (char c : word)
        utf8::append_codepoint(scratch.text, utf8::byte_to_codepoint(static_cast<uint8_t>(c)));
      key = scratch.text;
    }
    if (auto id = vocab.find(key)) {
      out.push_back(*id);
      return;
    }
  }
  if (whole_newline_words_ && word.find_first_not_of('\n') == std::string_view::npos) {
    if (auto id = vocab.find(word)) {
      out.push_back(*id);
      return;
    }
  }

  auto& symbols = scratch.symbols;
  if (byte_level_) {
    make_chain(
        word.size(), symbols, [](size_t) { return size_t{1}; },
        [&](size_t i, size_t) { return byte_unit_[static_cast<uint8_t>(word[i])]; });
  } else {
    make_chain(
        word.size(), symbols, [&](size_t i) { return utf8::char_length(word, i); },
        [&](size_t i, size_t len) { return unit_id(vocab, word.substr(i, len)); });
  }

  auto pair = [&](const MergeSymbol& l, const MergeSymbol& r) -> std::optional<MergeStep> {
    if (l.id < 0 || r.id < 0) return std::nullopt;
    const MergeTable::Entry* e = merges_.find(l.id, r.id);
    if (!e) return std::nullopt;
    return MergeStep{static_cast<uint32_t>(e->rank), e->result};
  };
  run_merges(symbols, pair, scratch.merge);

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const MergeSymbol& s = symbols[i];
    if (s.id >= 0 && s.id < n_vocab_) {
      out.push_back(s.id);
    } else {
      emit_fallback(word.substr(s.start, s.length), out);
    }
  }
}

}  // namespace graft

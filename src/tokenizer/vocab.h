// Vocab: everything tokenizer.ggml.* says about a vocabulary, read once from a
// GGUF file: token texts, scores and kinds, merges, the special ids, and the
// flags that steer encoding and decoding. Internal to the tokenizer layer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "io/gguf_file.h"
#include "tokenizer/string_map.h"
#include "util/result.h"

namespace graft {

using TokenId = int32_t;

namespace token_attr {
// Per-token attributes (a bit set); the GGUF token_type array gives the first
// six, some tokens get kControl from their text, kLstrip/kRstrip come from the
// model family.
inline constexpr uint16_t kNormal = 1 << 0;
inline constexpr uint16_t kUnknown = 1 << 1;
inline constexpr uint16_t kControl = 1 << 2;
inline constexpr uint16_t kUserDefined = 1 << 3;
inline constexpr uint16_t kUnused = 1 << 4;
inline constexpr uint16_t kByte = 1 << 5;
inline constexpr uint16_t kUndefined = 1 << 6;
inline constexpr uint16_t kLstrip = 1 << 7;  // swallow whitespace before the token when matched as special
inline constexpr uint16_t kRstrip = 1 << 8;  // swallow whitespace after it
}  // namespace token_attr

// How the vocabulary turns text into tokens.
enum class VocabKind {
  kByteLevelBpe,     // tokenizer.ggml.model "gpt2": GPT-2 byte encoding, regex pre-split, ranked merges
  kSentencePiece,    // "llama": score-driven merges over characters, byte fallback
  kSentencePieceBpe  // "gemma4": ranked merges over raw UTF-8 with spaces as U+2581, byte fallback
};

struct Vocab {
  std::string model;  // tokenizer.ggml.model
  std::string pre;    // tokenizer.ggml.pre ("default" when absent)
  VocabKind kind = VocabKind::kByteLevelBpe;

  std::vector<std::string> texts;  // as stored (empty entries renamed "[EMPTY_<id>]")
  std::vector<float> scores;
  std::vector<uint16_t> attrs;
  StringMap text_to_id;             // later duplicates win
  std::vector<std::string> merges;  // "left right", rank = index (BPE kinds only)

  TokenId bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, sep = -1, pad = -1, mask = -1;
  TokenId fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
  std::unordered_set<TokenId> eog;

  bool add_bos = false;
  bool add_eos = false;
  // SentencePiece: put a space before text that starts a sequence or follows a special token.
  bool add_space_prefix = false;
  bool escape_whitespace = false;  // spaces become U+2581 before the merges (SentencePiece kinds)
  bool ignore_merges = false;      // a pre-split word that is itself a token is taken whole (llama-3 family)

  int32_t size() const { return static_cast<int32_t>(texts.size()); }
  bool valid(TokenId id) const { return id >= 0 && id < size(); }
  bool has_attr(TokenId id, uint16_t attr) const { return valid(id) && (attrs[id] & attr) != 0; }
  std::optional<TokenId> find(std::string_view text) const {
    const int32_t id = text_to_id.find(text);
    return id < 0 ? std::nullopt : std::optional<TokenId>(id);
  }
};

// Reads and checks the vocabulary. Errors name the missing or mistyped key, or
// the unsupported model / pre-tokenizer (code "unsupported").
Result<Vocab> load_vocab(const GgufFile& file);

// The bytes token `id` stands for: the text of control, unknown and
// user-defined tokens as stored; normal tokens with the byte-level alphabet
// or U+2581 undone; <0xXX> byte tokens as their byte; nothing for unused ones.
std::string token_piece(const Vocab& v, TokenId id);

}  // namespace graft

// Tokenizer: text to token ids and back, exactly as the model was trained,
// read from the tokenizer.ggml.* metadata of a GGUF file. Handles byte-level
// BPE (tokenizer.ggml.model "gpt2": Llama 3, Qwen, GPT-2, DeepSeek, ...),
// SentencePiece ("llama": Llama 2, Mistral, Phi-3) and Gemma 4's
// SentencePiece-style BPE ("gemma4").
//
// A Tokenizer is immutable once made; every method may be called from many
// threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace graft {

class GgufFile;
using TokenId = int32_t;  // as in engine/batch.h

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* from an opened GGUF. Errors name the missing or
  // mistyped key, or the unsupported model / pre-tokenizer (code "unsupported").
  static Result<std::shared_ptr<const Tokenizer>> from_gguf(const GgufFile& file);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // add_special: add BOS/EOS as the vocabulary's add_bos/add_eos flags say.
  // parse_special: control and unknown token texts in `text` become single
  // tokens (chat templates need it); user-defined tokens always do. Invalid
  // UTF-8 is read as U+FFFD, one per bad byte (SentencePiece vocabularies
  // keep the raw bytes as byte tokens); either way decode() then shows each
  // bad byte as U+FFFD. Fails only for texts of 4 GiB or more.
  Result<std::vector<TokenId>> encode(std::string_view text, bool add_special, bool parse_special) const;

  // The text of a whole sequence, always valid UTF-8 (bytes that do not form
  // a character become U+FFFD). skip_special leaves out control and unknown
  // tokens. For SentencePiece vocabularies that add a space in front of the
  // text, the first token that is not a control token loses one leading
  // space, so decode(encode(x)) == x.
  std::string decode(const std::vector<TokenId>& ids, bool skip_special = false) const;

  // The raw bytes this token stands for (may be part of a UTF-8 character);
  // empty for unused tokens and ids outside the vocabulary.
  std::string token_bytes(TokenId id) const;
  // The vocabulary entry as stored ("Ġthe", "▁the", "<0x0A>"); empty for ids outside it.
  std::string token_text(TokenId id) const;

  int32_t n_vocab() const;
  TokenId bos() const;  // -1 when absent
  TokenId eos() const;
  TokenId eot() const;  // end of turn (<|eot_id|>, <|im_end|>, ...), -1 when absent
  TokenId unk() const;
  TokenId pad() const;
  bool add_bos() const;
  bool add_eos() const;

  bool is_eog(TokenId id) const;      // ends generation: eos, eot, eom and the vocabulary's other end tokens
  bool is_control(TokenId id) const;  // control tokens (<s>, <|im_start|>, ...): skipped by skip_special
  std::vector<TokenId> eog_tokens() const;                         // sorted
  std::optional<TokenId> find_token(std::string_view text) const;  // exact vocabulary entry lookup

  std::string model_type() const;  // tokenizer.ggml.model
  std::string pre_type() const;    // tokenizer.ggml.pre ("default" when the file has none)

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class StreamDecoder;
};

// Streaming detokenizer for generated tokens: push() returns only complete
// UTF-8; bytes of a character cut across tokens wait for the next token;
// bytes that cannot form a character become U+FFFD at once. The
// concatenation of everything returned (flush() included) is always valid
// UTF-8 and equals decode() of the same ids when strip_leading_space matches
// (see Tokenizer::decode). One per request; not shared between threads.
class StreamDecoder {
 public:
  // strip_leading_space: the tokens begin a text (SentencePiece vocabularies
  // drop the space the encoder put in front). Leave it false to continue a
  // prompt, where that space separates words.
  explicit StreamDecoder(std::shared_ptr<const Tokenizer> tok, bool skip_special = false,
                         bool strip_leading_space = false);

  std::string push(TokenId id);  // text that became complete with this token
  std::string flush();           // whatever is pending at the end (incomplete bytes -> U+FFFD)

 private:
  std::shared_ptr<const Tokenizer> tok_;
  bool skip_special_;
  bool strip_leading_space_;
  std::string pending_;
};

// A token piece written for people: printable text as is, \n \t \r and other
// control bytes escaped, invalid UTF-8 bytes as \xNN. Used by `graft tokenize`.
std::string escape_piece(std::string_view bytes);

}  // namespace graft

// The parts a Tokenizer is made of; shared by tokenizer.cpp and
// stream_decoder.cpp. Internal to the tokenizer layer.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/special_split.h"
#include "tokenizer/spm.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace graft {

struct Tokenizer::Impl {
  Vocab vocab;
  std::optional<PreTokenizer> pre;  // BPE kinds
  std::optional<BpeModel> bpe;      // BPE kinds
  std::optional<SpmModel> spm;      // SentencePiece
  std::optional<SpecialTokenSplitter> specials;
  std::vector<std::string> pieces;  // the bytes each token stands for

  // The bytes `id` adds to decoded text: nothing for an unknown id or (with
  // skip_special) a control or unknown token. `strip_pending` is the
  // SentencePiece leading-space rule: the first token that is not a control
  // token loses one leading space, then the flag clears.
  std::string_view output_piece(TokenId id, bool skip_special, bool& strip_pending) const;
};

}  // namespace graft

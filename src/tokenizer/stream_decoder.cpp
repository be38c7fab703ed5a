#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "util/utf8.h"

namespace graft {

StreamDecoder::StreamDecoder(std::shared_ptr<const Tokenizer> tok, bool skip_special,
                             bool strip_leading_space)
    : tok_(std::move(tok)),
      skip_special_(skip_special),
      strip_leading_space_(strip_leading_space && tok_->impl_->vocab.kind == VocabKind::kSentencePiece &&
                           tok_->impl_->vocab.add_space_prefix) {}

std::string StreamDecoder::push(TokenId id) {
  const std::string_view piece = tok_->impl_->output_piece(id, skip_special_, strip_leading_space_);
  pending_.append(piece.data(), piece.size());

  // Emit every complete character; hold back a tail that more bytes could
  // still complete; a byte that can start nothing valid becomes U+FFFD now.
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const size_t len = utf8::sequence_length(pending_, i);
    if (len > 0) {
      out.append(pending_, i, len);
      i += len;
    } else if (utf8::is_incomplete_prefix(pending_, i)) {
      break;
    } else {
      out += utf8::kReplacement;
      ++i;
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8::repair(pending_);
  pending_.clear();
  return out;
}

}  // namespace graft

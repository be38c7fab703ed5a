#include "tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>

#include "io/gguf_file.h"
#include "tokenizer/space_words.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/word_cache.h"
#include "util/utf8.h"

namespace graft {

namespace {

void escape_spaces(std::string_view text, std::string& out) {
  out.reserve(out.size() + text.size() + text.size() / 4);
  for (char c : text) {
    if (c == ' ') {
      out += kSpaceMark;
    } else {
      out.push_back(c);
    }
  }
}

struct EncodeScratch {
  std::vector<Fragment> fragments;
  std::string text;
  BpeScratch bpe;
  SpmScratch spm;
  WordCache cache;
};

// Fragments shorter than this skip the word cache (it would not pay for itself).
constexpr size_t kCacheFromBytes = 4096;

}  // namespace

std::string_view Tokenizer::Impl::output_piece(TokenId id, bool skip_special, bool& strip_pending) const {
  if (!vocab.valid(id)) return {};
  const uint16_t attr = vocab.attrs[id];
  if (skip_special && (attr & (token_attr::kControl | token_attr::kUnknown))) return {};
  std::string_view piece = pieces[id];
  if (strip_pending && !(attr & token_attr::kControl)) {
    strip_pending = false;
    if (!piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
  }
  return piece;
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Result<std::shared_ptr<const Tokenizer>> Tokenizer::from_gguf(const GgufFile& file) {
  auto impl = std::make_unique<Impl>();
  GRAFT_TRY(impl->vocab, load_vocab(file));
  const Vocab& v = impl->vocab;
  if (v.kind == VocabKind::kSentencePiece) {
    impl->spm.emplace(v);
  } else {
    const PreTokenizerSpec* spec = find_pre_tokenizer(v.pre);
    GRAFT_TRY(auto pre, PreTokenizer::create(*spec));
    impl->pre.emplace(std::move(pre));
    GRAFT_TRY(auto bpe, BpeModel::create(v, spec->whole_newline_words));
    impl->bpe.emplace(std::move(bpe));
  }
  impl->specials.emplace(v);
  impl->pieces.resize(v.texts.size());
  for (TokenId id = 0; id < v.size(); ++id) impl->pieces[id] = token_piece(v, id);
  impl->vocab.merges = {};  // parsed into the merge table; the text is not needed again
  return std::shared_ptr<const Tokenizer>(new Tokenizer(std::move(impl)));
}

Result<std::vector<TokenId>> Tokenizer::encode(std::string_view text, bool add_special,
                                               bool parse_special) const {
  if (text.size() >= UINT32_MAX) {
    return errorf("invalid_argument", "text of {} bytes is too long to tokenize (the limit is 4 GiB)",
                  text.size());
  }
  const Impl& m = *impl_;
  const Vocab& v = m.vocab;
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && v.add_bos && v.bos >= 0) out.push_back(v.bos);

  EncodeScratch scratch;
  m.specials->split(v, text, parse_special, scratch.fragments);
  bool prev_special = true;
  for (const Fragment& frag : scratch.fragments) {
    if (frag.token >= 0) {
      out.push_back(frag.token);
      prev_special = true;
      continue;
    }
    std::string_view piece = text.substr(frag.offset, frag.length);
    std::string repaired;
    if (v.kind != VocabKind::kSentencePiece && !utf8::is_valid(piece)) {
      repaired = utf8::repair(piece);
      piece = repaired;
    }
    scratch.cache.invalidate();
    const bool use_cache = piece.size() >= kCacheFromBytes;
    auto bpe_word = [&](std::string_view word, std::vector<TokenId>& into) {
      m.bpe->encode_word(v, word, scratch.bpe, into);
    };
    auto spm_word = [&](std::string_view word, std::vector<TokenId>& into) {
      m.spm->encode_word(v, word, scratch.spm, into);
    };
    switch (v.kind) {
      case VocabKind::kByteLevelBpe: {
        GRAFT_TRY_STATUS(m.pre->split(piece, [&](std::string_view word) {
          if (use_cache) {
            scratch.cache.encode(word, out, bpe_word);
          } else {
            bpe_word(word, out);
          }
        }));
        break;
      }
      case VocabKind::kSentencePiece: {
        scratch.text.clear();
        if (v.add_space_prefix && prev_special) scratch.text += kSpaceMark;
        escape_spaces(piece, scratch.text);
        for_each_space_word(scratch.text, m.spm->space_joiners(), [&](std::string_view word) {
          if (use_cache) {
            scratch.cache.encode(word, out, spm_word);
          } else {
            spm_word(word, out);
          }
        });
        break;
      }
      case VocabKind::kSentencePieceBpe: {
        scratch.text.clear();
        escape_spaces(piece, scratch.text);
        GRAFT_TRY_STATUS(m.pre->split(scratch.text, [&](std::string_view line) {
          for_each_space_word(line, m.bpe->space_joiners(), [&](std::string_view word) {
            if (use_cache) {
              scratch.cache.encode(word, out, bpe_word);
            } else {
              bpe_word(word, out);
            }
          });
        }));
        break;
      }
    }
    prev_special = false;
  }
  if (add_special && v.add_eos && v.eos >= 0) out.push_back(v.eos);
  return out;
}

std::string Tokenizer::decode(const std::vector<TokenId>& ids, bool skip_special) const {
  const Impl& m = *impl_;
  bool strip = m.vocab.kind == VocabKind::kSentencePiece && m.vocab.add_space_prefix;
  std::string bytes;
  for (TokenId id : ids) {
    const std::string_view piece = m.output_piece(id, skip_special, strip);
    bytes.append(piece.data(), piece.size());
  }
  if (utf8::is_valid(bytes)) return bytes;
  return utf8::repair(bytes);
}

std::string Tokenizer::token_bytes(TokenId id) const {
  return impl_->vocab.valid(id) ? impl_->pieces[id] : std::string();
}
std::string Tokenizer::token_text(TokenId id) const {
  return impl_->vocab.valid(id) ? impl_->vocab.texts[id] : std::string();
}
int32_t Tokenizer::n_vocab() const {
  return impl_->vocab.size();
}
TokenId Tokenizer::bos() const {
  return impl_->vocab.bos;
}
TokenId Tokenizer::eos() const {
  return impl_->vocab.eos;
}
TokenId Tokenizer::eot() const {
  return impl_->vocab.eot;
}
TokenId Tokenizer::unk() const {
  return impl_->vocab.unk;
}
TokenId Tokenizer::pad() const {
  return impl_->vocab.pad;
}
bool Tokenizer::add_bos() const {
  return impl_->vocab.add_bos;
}
bool Tokenizer::add_eos() const {
  return impl_->vocab.add_eos;
}
bool Tokenizer::is_eog(TokenId id) const {
  return impl_->vocab.eog.count(id) > 0;
}
bool Tokenizer::is_control(TokenId id) const {
  return impl_->vocab.has_attr(id, token_attr::kControl);
}
std::vector<TokenId> Tokenizer::eog_tokens() const {
  std::vector<TokenId> ids(impl_->vocab.eog.begin(), impl_->vocab.eog.end());
  std::sort(ids.begin(), ids.end());
  return ids;
}
std::optional<TokenId> Tokenizer::find_token(std::string_view text) const {
  return impl_->vocab.find(text);
}
std::string Tokenizer::model_type() const {
  return impl_->vocab.model;
}
std::string Tokenizer::pre_type() const {
  return impl_->vocab.pre;
}

std::string escape_piece(std::string_view bytes) {
  std::string out;
  size_t i = 0;
  while (i < bytes.size()) {
    const auto c = static_cast<uint8_t>(bytes[i]);
    const size_t len = utf8::sequence_length(bytes, i);
    if (len > 1) {
      out.append(bytes.substr(i, len));
      i += len;
      continue;
    }
    ++i;
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (c < 0x20 || c >= 0x7F) {
          out += fmt::format("\\x{:02X}", c);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  return out;
}

}  // namespace graft

#include "tokenizer/vocab.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>

#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/space_words.h"
#include "util/log.h"
#include "util/strings.h"
#include "util/utf8.h"

namespace graft {

namespace {

constexpr std::string_view kPrefix = "tokenizer.ggml.";

std::string key(std::string_view name) {
  return std::string(kPrefix) + std::string(name);
}

uint16_t attr_from_type(int64_t type) {
  switch (type) {
    case 1:
      return token_attr::kNormal;
    case 2:
      return token_attr::kUnknown;
    case 3:
      return token_attr::kControl;
    case 4:
      return token_attr::kUserDefined;
    case 5:
      return token_attr::kUnused;
    case 6:
      return token_attr::kByte;
    default:
      return token_attr::kUndefined;
  }
}

// Tokens whose text marks them as the end of a turn or of generation, and the
// fill-in-the-middle tokens, for files that do not name them.
constexpr std::array<std::string_view, 11> kEotTexts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",         "<|endoftext|>",     "<|end_of_text|>",
    "<EOT>",      "_<EOT>",     "[EOT]",   "<｜end▁of▁sentence｜>", "<end_of_utterance>"};
constexpr std::array<std::string_view, 1> kEomTexts = {"<|eom_id|>"};
constexpr std::array<std::string_view, 8> kFimPreTexts = {"<|fim_prefix|>",  "<fim-prefix>", "<fim_prefix>",
                                                          "<｜fim▁begin｜>", "<PRE>",        "▁<PRE>",
                                                          "<|code_prefix|>", "<|prefix|>"};
constexpr std::array<std::string_view, 8> kFimSufTexts = {"<|fim_suffix|>",  "<fim-suffix>", "<fim_suffix>",
                                                          "<｜fim▁hole｜>",  "<SUF>",        "▁<SUF>",
                                                          "<|code_suffix|>", "<|suffix|>"};
constexpr std::array<std::string_view, 8> kFimMidTexts = {"<|fim_middle|>",  "<fim-middle>", "<fim_middle>",
                                                          "<｜fim▁end｜>",   "<MID>",        "▁<MID>",
                                                          "<|code_middle|>", "<|middle|>"};
constexpr std::array<std::string_view, 5> kFimPadTexts = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                                          "[PAD]"};
constexpr std::array<std::string_view, 5> kFimRepTexts = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                                          "<REPO>", "<reponame>"};
constexpr std::array<std::string_view, 1> kFimSepTexts = {"<|file_sep|>"};
constexpr std::array<std::string_view, 22> kEogTexts = {"<|eot_id|>",
                                                        "<|im_end|>",
                                                        "<|end|>",
                                                        "<|return|>",
                                                        "<|call|>",
                                                        "<|flush|>",
                                                        "<|calls|>",
                                                        "<end_of_turn>",
                                                        "<|endoftext|>",
                                                        "</s>",
                                                        "<|eom_id|>",
                                                        "<EOT>",
                                                        "_<EOT>",
                                                        "[EOT]",
                                                        "[EOS]",
                                                        "<|end_of_text|>",
                                                        "<end_of_utterance>",
                                                        "<eos>",
                                                        "<turn|>",
                                                        "<|tool_response>",
                                                        "<｜end▁of▁sentence｜>",
                                                        "[e~["};

template <size_t N>
bool is_one_of(std::string_view text, const std::array<std::string_view, N>& list) {
  return std::find(list.begin(), list.end(), text) != list.end();
}

// Fills `id` from the lowest-numbered token whose text is in `list`, unless
// the file already named it; the token becomes a control token.
template <size_t N>
void detect_by_text(Vocab& v, TokenId& id, const std::array<std::string_view, N>& list) {
  if (id != -1) return;
  for (std::string_view text : list) {
    auto found = v.find(text);
    if (found && (id == -1 || *found < id)) id = *found;
  }
  if (id != -1) v.attrs[id] |= token_attr::kControl;
}

Status read_special_ids(const GgufFile& file, Vocab& v) {
  const std::pair<std::string_view, TokenId*> keys[] = {
      {"bos_token_id", &v.bos},         {"eos_token_id", &v.eos},         {"eot_token_id", &v.eot},
      {"eom_token_id", &v.eom},         {"unknown_token_id", &v.unk},     {"seperator_token_id", &v.sep},
      {"padding_token_id", &v.pad},     {"mask_token_id", &v.mask},       {"fim_pre_token_id", &v.fim_pre},
      {"fim_suf_token_id", &v.fim_suf}, {"fim_mid_token_id", &v.fim_mid}, {"fim_pad_token_id", &v.fim_pad},
      {"fim_rep_token_id", &v.fim_rep}, {"fim_sep_token_id", &v.fim_sep}, {"prefix_token_id", &v.fim_pre},
      {"suffix_token_id", &v.fim_suf},  {"middle_token_id", &v.fim_mid},
  };
  for (const auto& [name, id] : keys) {
    if (!v.valid(*id)) *id = -1;  // a family default the vocabulary is too small for
    if (!file.has(key(name))) continue;
    auto value = file.get_int(key(name));
    if (!value) return value.error();
    if (*value >= 0 && *value < v.size()) {
      *id = static_cast<TokenId>(*value);
    } else {
      GRAFT_LOG_WARN("{}: {}{} = {} is outside the vocabulary of {} tokens; ignored", file.path(), kPrefix,
                     name, *value, v.size());
    }
  }
  return {};
}

Status read_flags(const GgufFile& file, Vocab& v) {
  const std::pair<std::string_view, bool*> keys[] = {{"add_bos_token", &v.add_bos},
                                                     {"add_eos_token", &v.add_eos},
                                                     {"add_space_prefix", &v.add_space_prefix}};
  for (const auto& [name, flag] : keys) {
    if (!file.has(key(name))) continue;
    auto value = file.get_bool(key(name));
    if (!value) return value.error();
    *flag = *value;
  }
  return {};
}

void mark_end_of_generation(Vocab& v) {
  detect_by_text(v, v.eot, kEotTexts);
  detect_by_text(v, v.eom, kEomTexts);
  detect_by_text(v, v.fim_pre, kFimPreTexts);
  detect_by_text(v, v.fim_suf, kFimSufTexts);
  detect_by_text(v, v.fim_mid, kFimMidTexts);
  detect_by_text(v, v.fim_pad, kFimPadTexts);
  detect_by_text(v, v.fim_rep, kFimRepTexts);
  detect_by_text(v, v.fim_sep, kFimSepTexts);

  // Control tokens named "unused..." are placeholders.
  for (TokenId id = 0; id < v.size(); ++id) {
    if ((v.attrs[id] & token_attr::kControl) && v.texts[id].find("unused") != std::string::npos) {
      v.attrs[id] |= token_attr::kUnused;
    }
  }

  for (TokenId id : {v.fim_pad, v.fim_rep, v.fim_sep, v.eos, v.eot, v.eom}) {
    if (id != -1) v.eog.insert(id);
  }
  for (std::string_view text : kEogTexts) {
    auto id = v.find(text);
    if (!id) continue;
    v.eog.insert(*id);
    v.attrs[*id] |= token_attr::kControl;
  }
  // Harmony-style chat formats render these as text.
  for (std::string_view text : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    if (auto id = v.find(text)) v.attrs[*id] = token_attr::kUserDefined;
  }
  // Where a format has explicit return/call tokens, <|end|> only ends a message.
  auto end = v.find("<|end|>");
  const bool has_return = v.find("<|return|>").has_value();
  const bool has_call = v.find("<|call|>") || v.find("<|calls|>");
  const bool has_flush = v.find("<|flush|>").has_value();
  if (end && ((has_return && has_call) || (has_call && has_flush))) {
    v.eog.erase(*end);
    v.attrs[*end] = token_attr::kUserDefined;
  }
  // Gemma 4 uses </s> as ordinary text.
  auto close_s = v.find("</s>");
  if (close_s && v.find("<|tool_response>")) {
    v.eog.erase(*close_s);
    v.attrs[*close_s] = token_attr::kNormal;
  }
}

// Phi-3 swallows the whitespace after its chat tokens.
void apply_family_attrs(const GgufFile& file, Vocab& v) {
  const std::string name = to_lower_ascii(file.find_string("general.name").value_or(""));
  if (name.find("phi-3") == std::string::npos && name.find("phi3") == std::string::npos) return;
  constexpr uint16_t kSpecial = token_attr::kControl | token_attr::kUserDefined | token_attr::kUnknown;
  for (TokenId id = 0; id < v.size(); ++id) {
    if (v.attrs[id] & kSpecial) v.attrs[id] |= token_attr::kRstrip;
  }
  if (auto id = v.find("</s>")) v.attrs[*id] |= token_attr::kRstrip;
  for (std::string_view text : {"<unk>", "<s>", "<|endoftext|>"}) {
    if (auto id = v.find(text)) v.attrs[*id] &= ~token_attr::kRstrip;
  }
}

}  // namespace

Result<Vocab> load_vocab(const GgufFile& file) {
  Vocab v;
  GRAFT_TRY(v.model, file.get_string(key("model")));
  v.pre = file.find_string(key("pre")).value_or("");

  const PreTokenizerSpec* spec = nullptr;
  if (v.model == "gpt2" || v.model == "gemma4") {
    if (v.model == "gemma4") v.pre = "gemma4";
    spec = find_pre_tokenizer(v.pre);
    if (!spec) {
      return errorf("unsupported", "{}: unsupported pre-tokenizer {}pre = '{}'", file.path(), kPrefix, v.pre);
    }
    if (v.pre.empty()) {
      GRAFT_LOG_WARN(
          "{}: no {}pre in the file; using the default pre-tokenizer, which may not match the model",
          file.path(), kPrefix);
      v.pre = "default";
    }
    v.kind = spec->byte_level ? VocabKind::kByteLevelBpe : VocabKind::kSentencePieceBpe;
    v.escape_whitespace = !spec->byte_level;
    v.ignore_merges = spec->ignore_merges;
    v.add_bos = spec->add_bos;
    if (v.model == "gpt2") v.bos = v.eos = 11;
    if (spec->no_default_bos) v.bos = -1;
  } else if (v.model == "llama") {
    v.kind = VocabKind::kSentencePiece;
    if (v.pre.empty()) v.pre = "default";
    v.escape_whitespace = true;
    v.add_space_prefix = true;
    v.add_bos = true;
    v.bos = 1;
    v.eos = 2;
    v.unk = 0;
  } else {
    return errorf("unsupported",
                  "{}: unsupported tokenizer {}model = '{}' (graft reads 'gpt2', 'llama' and 'gemma4')",
                  file.path(), kPrefix, v.model);
  }

  GRAFT_TRY(v.texts, file.get_string_array(key("tokens")));
  const size_t n = v.texts.size();
  if (n == 0) return errorf("invalid_file", "{}: {}tokens is empty", file.path(), kPrefix);
  if (n > static_cast<size_t>(INT32_MAX)) return errorf("invalid_file", "{}: too many tokens", file.path());

  v.scores.assign(n, 0.0f);
  if (file.has(key("scores"))) {
    auto floats = file.get_float_array(key("scores"));
    std::vector<float> scores;
    if (floats) {
      scores = std::move(*floats);
    } else {
      GRAFT_TRY(auto ints, file.get_int_array(key("scores")));
      scores.assign(ints.begin(), ints.end());
    }
    if (scores.size() < n) {
      return errorf("invalid_file", "{}: {}scores has {} entries for {} tokens", file.path(), kPrefix,
                    scores.size(), n);
    }
    std::copy_n(scores.begin(), n, v.scores.begin());
  }

  v.attrs.assign(n, token_attr::kNormal);
  if (file.has(key("token_type"))) {
    GRAFT_TRY(auto types, file.get_int_array(key("token_type")));
    if (types.size() < n) {
      return errorf("invalid_file", "{}: {}token_type has {} entries for {} tokens", file.path(), kPrefix,
                    types.size(), n);
    }
    for (size_t i = 0; i < n; ++i) v.attrs[i] = attr_from_type(types[i]);
  }

  v.text_to_id.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (v.texts[i].empty()) v.texts[i] = "[EMPTY_" + std::to_string(i) + "]";
    v.text_to_id.set(v.texts[i], static_cast<TokenId>(i));
  }

  if (v.kind != VocabKind::kSentencePiece) {
    GRAFT_TRY(v.merges, file.get_string_array(key("merges")));
  }

  GRAFT_TRY_STATUS(read_flags(file, v));
  if (spec && spec->whole_newline_words) v.add_bos = true;  // Gemma 4 always starts with BOS
  GRAFT_TRY_STATUS(read_special_ids(file, v));
  mark_end_of_generation(v);
  apply_family_attrs(file, v);
  return v;
}

std::string token_piece(const Vocab& v, TokenId id) {
  const std::string& text = v.texts[id];
  const uint16_t attr = v.attrs[id];
  if (attr & (token_attr::kControl | token_attr::kUnknown | token_attr::kUserDefined)) return text;
  if (attr & token_attr::kNormal) {
    if (v.kind == VocabKind::kByteLevelBpe) {
      std::string out;
      out.reserve(text.size());
      size_t i = 0;
      while (i < text.size()) {
        const size_t len = utf8::sequence_length(text, i);
        if (len == 0) {  // not UTF-8: keep the byte
          out.push_back(text[i++]);
          continue;
        }
        const int byte = utf8::codepoint_to_byte(utf8::decode_at(text, i, len));
        if (byte >= 0) {
          out.push_back(static_cast<char>(byte));
        } else {
          out.append(text, i, len);  // a character outside the byte alphabet stands for itself
        }
        i += len;
      }
      return out;
    }
    std::string out;
    out.reserve(text.size());
    for (size_t p = 0;;) {
      const size_t q = text.find(kSpaceMark, p);
      out.append(text, p, q == std::string::npos ? std::string::npos : q - p);
      if (q == std::string::npos) break;
      out.push_back(' ');
      p = q + kSpaceMark.size();
    }
    return out;
  }
  if (attr & token_attr::kByte) {
    unsigned value = 0;
    if (text.size() == 6 && text.starts_with("<0x") && text[5] == '>' &&
        std::sscanf(text.c_str() + 3, "%2x", &value) == 1) {
      return std::string(1, static_cast<char>(value));
    }
    return text;
  }
  return {};  // unused or undefined tokens produce no text
}

}  // namespace graft

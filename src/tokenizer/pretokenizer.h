// The pre-tokenizer of byte-level BPE vocabularies: regular expressions that
// cut text into words before the merges run (tokenizer.ggml.pre names the
// set). Each expression of a set splits every piece the previous one left;
// text between matches is kept as pieces of its own, so the pieces always
// cover the whole input.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

struct pcre2_real_code_8;

namespace graft {

// What one tokenizer.ggml.pre value means.
struct PreTokenizerSpec {
  std::vector<std::string_view> names;    // tokenizer.ggml.pre values that select it
  std::vector<std::string_view> regexes;  // PCRE2 syntax; \s and \S mean Unicode White_Space
  bool byte_level = true;                 // GPT-2 byte encoding (false: raw UTF-8 with spaces as U+2581)
  bool ignore_merges = false;             // a word that is a token is taken whole
  bool add_bos = false;                   // default for tokenizer.ggml.add_bos_token
  bool no_default_bos = false;            // the family has no BOS unless the file names one
  bool whole_newline_words = false;       // a run of newlines that is a token is taken whole
};

// The spec for a tokenizer.ggml.pre value (an absent key means "default"),
// nullptr when graft does not know it.
const PreTokenizerSpec* find_pre_tokenizer(std::string_view pre);

// Every tokenizer.ggml.pre value graft knows.
std::vector<std::string_view> known_pre_tokenizers();

class PreTokenizer {
 public:
  static Result<PreTokenizer> create(const PreTokenizerSpec& spec);

  using PieceFn = std::function<void(std::string_view)>;

  // Calls fn with each piece of `text` (valid UTF-8), in order; the pieces
  // are views into `text` and join back to it.
  Status split(std::string_view text, const PieceFn& fn) const;

 private:
  struct MatchState;
  Status split_level(size_t level, std::string_view piece, const PieceFn& fn, MatchState& state) const;

  std::vector<std::shared_ptr<pcre2_real_code_8>> regexes_;
};

// A regex source with \s and \S replaced by explicit Unicode White_Space
// classes (PCRE2's own \s leaves out U+0085). Exposed for tests.
std::string expand_whitespace_classes(std::string_view regex);

}  // namespace graft

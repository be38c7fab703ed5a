#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <string>

#include "util/utf8.h"

namespace graft {

namespace {

// Pieces of the published pre-tokenizer expressions (tokenizer.json of each
// model family), in the form the reference implementation applies them.
#define CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define GPT2_WORDS R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))"
#define LLAMA3_WORDS \
  CONTRACTIONS R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"
#define QWEN2_WORDS \
  CONTRACTIONS R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"
// Letters starting upper-then-lower and lower-only words (tekken, gpt-4o);
// "upper" is any letter outside a-z, "lower" any letter outside A-Z.
#define CASED_WORD_UPPER_FIRST R"([^\r\n\p{L}\p{N}]?(?:(?=\p{L})[^a-z])*(?:(?=\p{L})[^A-Z])+)"
#define CASED_WORD_LOWER_AFTER R"([^\r\n\p{L}\p{N}]?(?:(?=\p{L})[^a-z])+(?:(?=\p{L})[^A-Z])*)"
// CJK ideographs, U+0800..U+4E00 and Hangul, minus the whitespace characters
// in that span (the reference splitter treats those as whitespace first).
#define CJK_AND_HANGUL                                                                                        \
  R"([\x{800}-\x{167F}\x{1681}-\x{1FFF}\x{200B}-\x{2027}\x{202A}-\x{202E}\x{2030}-\x{205E}\x{2060}-\x{2FFF})" \
  R"(\x{3001}-\x{9FA5}\x{AC00}-\x{D7FF}]+)"
#define CJK_KANA R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)"
#define NO_PUNCT_RUN R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)"

const std::array<PreTokenizerSpec, 24>& specs() {
  static const std::array<PreTokenizerSpec, 24> table = {{
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
        "jina-v5-nano"},
       {LLAMA3_WORDS},
       true,
       /*ignore_merges=*/true,
       /*add_bos=*/true},
      {{"dbrx", "smaug-bpe"}, {LLAMA3_WORDS}},
      {{"glm4", "chatglm-bpe"}, {LLAMA3_WORDS}, true, false, false, /*no_default_bos=*/true},
      {{"jais-2"},
       {CONTRACTIONS R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+)"
                     R"(|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S))"
                     R"(|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})"}},
      {{"deepseek-llm"},
       {R"([\r\n])",
        R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF})"
        R"(\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})"
        R"(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})"
        R"(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})"
        R"(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B})"
        R"(\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC})"
        R"(\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
        R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134})"
        R"(\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
        R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787})"
        R"(\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A})"
        R"(\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
        R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)",
        R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3001}-\x{3002}]+)",
        // \s+$, tried only where a whitespace run starts (the same matches, in linear time).
        R"((?<!\s)\s+$)", CJK_AND_HANGUL, R"(\p{N}+)"}},
      {{"deepseek-v3", "hunyuan-dense", "joyai-llm"},
       {R"(\p{N}{1,3})", CJK_KANA,
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)"
        R"(| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"youtu"},
       {R"([\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+)"
        R"(|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}\x{2019}\x{2014}\x{FF1A}\x{FF1B}\x{FF0C}\x{3001}-\x{303F}\x{FE30}-\x{FE4F}]+)"
        R"(|[\x{3105}-\x{312F}]+|[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
        R"([^\r\n\p{L}\p{N}]?[\p{L}\p{M}]*[\p{L}\p{M}]+)" CONTRACTIONS
        R"(?|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+[\p{L}\p{M}]*)" CONTRACTIONS
        R"(?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       true,
       /*ignore_merges=*/true},
      {{"deepseek-coder"}, {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", CJK_AND_HANGUL, R"(\p{N})"}},
      {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", GPT2_WORDS, R"([0-9][0-9][0-9])"}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
       {R"(\p{N})", GPT2_WORDS}},
      {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
        "modern-bert", "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4", "jina-v1-en",
        "jina-v2-code", "roberta-bpe"},
       {GPT2_WORDS}},
      {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open",
        "grok-2"},
       {QWEN2_WORDS}},
      {{"qwen35"},
       {CONTRACTIONS R"(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+)"
                     R"(|\s+(?!\S)|\s+)"}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, {NO_PUNCT_RUN}},
      {{"viking"}, {NO_PUNCT_RUN, R"(\p{N})"}},
      {{"tekken"},
       {CASED_WORD_UPPER_FIRST "|" CASED_WORD_LOWER_AFTER
                               R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       true,
       /*ignore_merges=*/true,
       /*add_bos=*/true},
      {{"chameleon"},
       {R"(<sentinel:[0-9]+>)", R"((?:IMGIMG)(?:(?:A|B|C|D|E|F|G|H|I){1,4})Z)", R"((?:[\t\n]|    |  ))",
        R"(\p{N})", R"([\p{P}!-/:-@\[-`{-~])", GPT2_WORDS},
       true,
       false,
       /*add_bos=*/true},
      {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"},
       {CASED_WORD_UPPER_FIRST CONTRACTIONS
        "?|" CASED_WORD_LOWER_AFTER CONTRACTIONS
        R"(?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"granite-embed-multi-97m"},
       {R"([^\r\n\p{L}\p{N}]?(?:(?=[\p{L}\p{M}])[^a-z])*(?:(?=[\p{L}\p{M}])[^A-Z])+)" CONTRACTIONS
        R"(?|[^\r\n\p{L}\p{N}]?(?:(?=[\p{L}\p{M}])[^a-z])+(?:(?=[\p{L}\p{M}])[^A-Z])*)" CONTRACTIONS
        R"(?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       true,
       /*ignore_merges=*/true},
      {{"bailingmoe", "bailingmoe2", "llada-moe"},
       {R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*)"
        R"(|\s*[\r\n]|\s+(?!\S)|\s+)"}},
      {{"seed-coder"},
       {CONTRACTIONS
        R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"laguna"}, {R"([^\n]+|[\n]+)", QWEN2_WORDS}},
      {{"minicpm5"},
       {R"(\p{N}{1,3})", CONTRACTIONS
        R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       true,
       /*ignore_merges=*/true},
      {{"default"}, {R"([\p{P}\$\+<=>\^~\|]+)", GPT2_WORDS, R"(\p{N}+)", R"([0-9][0-9][0-9])"}},
  }};
  return table;
}

// SentencePiece-style BPE: spaces are already U+2581, only newlines split.
const PreTokenizerSpec& newline_spec(bool gemma) {
  static const PreTokenizerSpec gemma4{{"gemma4", "granite-embed-multi-311m"},
                                       {R"([^\n]+|[\n]+)"},
                                       false,
                                       false,
                                       /*add_bos=*/true,
                                       false,
                                       /*whole_newline_words=*/true};
  static const PreTokenizerSpec sarvam{{"sarvam-moe"}, {R"([^\n]+|[\n]+)"}, false};
  return gemma ? gemma4 : sarvam;
}

// Unicode White_Space, as a class body.
constexpr std::string_view kWhitespace =
    R"(\t\n\x{0B}\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

struct CodeFree {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
struct MatchDataFree {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};
struct JitStackFree {
  void operator()(pcre2_jit_stack* stack) const { pcre2_jit_stack_free(stack); }
};
struct MatchContextFree {
  void operator()(pcre2_match_context* ctx) const { pcre2_match_context_free(ctx); }
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

const PreTokenizerSpec* find_pre_tokenizer(std::string_view pre) {
  if (pre.empty()) pre = "default";
  for (const auto& spec : specs()) {
    for (std::string_view name : spec.names) {
      if (name == pre) return &spec;
    }
  }
  for (bool gemma : {true, false}) {
    for (std::string_view name : newline_spec(gemma).names) {
      if (name == pre) return &newline_spec(gemma);
    }
  }
  return nullptr;
}

std::vector<std::string_view> known_pre_tokenizers() {
  std::vector<std::string_view> names;
  for (const auto& spec : specs()) names.insert(names.end(), spec.names.begin(), spec.names.end());
  for (bool gemma : {true, false}) {
    const auto& spec = newline_spec(gemma);
    names.insert(names.end(), spec.names.begin(), spec.names.end());
  }
  return names;
}

std::string expand_whitespace_classes(std::string_view regex) {
  std::string out;
  out.reserve(regex.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < regex.size(); ++i) {
    const char c = regex[i];
    if (c == '\\' && i + 1 < regex.size()) {
      const char next = regex[i + 1];
      if (next == 's') {
        out += in_class ? std::string(kWhitespace) : "[" + std::string(kWhitespace) + "]";
      } else if (next == 'S' && !in_class) {
        out += "[^" + std::string(kWhitespace) + "]";
      } else {
        out += c;
        out += next;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < regex.size() && regex[i + 1] == '^') out += regex[++i];
      if (i + 1 < regex.size() && regex[i + 1] == ']') out += regex[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

Result<PreTokenizer> PreTokenizer::create(const PreTokenizerSpec& spec) {
  PreTokenizer pre;
  for (std::string_view source : spec.regexes) {
    const std::string pattern = expand_whitespace_classes(source);
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &error, &error_offset, nullptr);
    if (!code) {
      return errorf("internal", "pre-tokenizer regex does not compile at offset {}: {} (regex: {})",
                    error_offset, pcre2_message(error), pattern);
    }
    // Without JIT the interpreter still matches correctly, only slower.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    pre.regexes_.emplace_back(code, CodeFree{});
  }
  return pre;
}

// Per-call matching state: one match block per expression, a step limit
// high enough for long inputs (every expression here runs in linear time),
// and a larger JIT stack made only if some word needs it.
struct PreTokenizer::MatchState {
  std::vector<std::unique_ptr<pcre2_match_data, MatchDataFree>> match;
  std::unique_ptr<pcre2_match_context, MatchContextFree> context;
  std::unique_ptr<pcre2_jit_stack, JitStackFree> jit_stack;
};

Status PreTokenizer::split(std::string_view text, const PieceFn& fn) const {
  if (text.empty()) return {};
  MatchState state;
  state.context.reset(pcre2_match_context_create(nullptr));
  if (!state.context) return errorf("internal", "out of memory creating a regex match context");
  pcre2_set_match_limit(state.context.get(), UINT32_MAX);
  for (const auto& regex : regexes_) {
    state.match.emplace_back(pcre2_match_data_create_from_pattern(regex.get(), nullptr));
    if (!state.match.back()) return errorf("internal", "out of memory creating regex match data");
  }
  return split_level(0, text, fn, state);
}

Status PreTokenizer::split_level(size_t level, std::string_view piece, const PieceFn& fn,
                                 MatchState& state) const {
  if (level == regexes_.size()) {
    fn(piece);
    return {};
  }
  pcre2_code* regex = regexes_[level].get();
  pcre2_match_data* match = state.match[level].get();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
  PCRE2_SIZE start = 0;
  PCRE2_SIZE gap_start = 0;
  while (start < piece.size()) {
    const int rc =
        pcre2_match(regex, subject, piece.size(), start, PCRE2_NO_UTF_CHECK, match, state.context.get());
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !state.jit_stack) {
      // Deep backtracking on a long word: retry with a larger JIT stack.
      state.jit_stack.reset(pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr));
      if (!state.jit_stack) return errorf("internal", "out of memory creating a regex stack");
      pcre2_jit_stack_assign(state.context.get(), nullptr, state.jit_stack.get());
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return errorf("invalid_argument", "pre-tokenizer regex failed: {}", pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    const PCRE2_SIZE begin = ovector[0];
    const PCRE2_SIZE end = ovector[1];
    if (end == begin) {
      // An empty match splits nothing; step over one character.
      start = utf8::next_char(piece, begin);
      continue;
    }
    if (begin > gap_start)
      GRAFT_TRY_STATUS(split_level(level + 1, piece.substr(gap_start, begin - gap_start), fn, state));
    GRAFT_TRY_STATUS(split_level(level + 1, piece.substr(begin, end - begin), fn, state));
    start = gap_start = end;
  }
  if (gap_start < piece.size()) GRAFT_TRY_STATUS(split_level(level + 1, piece.substr(gap_start), fn, state));
  return {};
}

}  // namespace graft

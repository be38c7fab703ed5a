// The pre-tokenizer regex sets and the UTF-8 helpers under them.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"
#include "util/files.h"
#include "util/utf8.h"

namespace graft {
namespace {

std::vector<std::string> split(const PreTokenizer& pre, std::string_view text) {
  std::vector<std::string> pieces;
  Status status = pre.split(text, [&](std::string_view piece) { pieces.emplace_back(piece); });
  EXPECT_TRUE(status.ok()) << status.error().message;
  return pieces;
}

PreTokenizer make(std::string_view name) {
  const PreTokenizerSpec* spec = find_pre_tokenizer(name);
  EXPECT_NE(spec, nullptr) << name;
  auto pre = PreTokenizer::create(*spec);
  EXPECT_TRUE(pre.ok()) << pre.error().message;
  return std::move(pre).value();
}

TEST(PreTokenizer, EveryKnownSetCompilesAndCoversItsInput) {
  auto mixed = read_file(std::string(GRAFT_SOURCE_DIR) + "/bench/data/mixed.txt");
  ASSERT_TRUE(mixed.ok());
  std::set<std::string_view> names;
  for (std::string_view name : known_pre_tokenizers()) {
    EXPECT_TRUE(names.insert(name).second) << "listed twice: " << name;
    const PreTokenizerSpec* spec = find_pre_tokenizer(name);
    ASSERT_NE(spec, nullptr) << name;
    auto pre = PreTokenizer::create(*spec);
    ASSERT_TRUE(pre.ok()) << name << ": " << pre.error().message;
    std::string joined;
    size_t count = 0;
    for (const std::string& piece : split(*pre, *mixed)) {
      EXPECT_FALSE(piece.empty()) << name;
      joined += piece;
      ++count;
    }
    EXPECT_EQ(joined, *mixed) << name;
    EXPECT_GT(count, 100u) << name;
  }
  EXPECT_GE(names.size(), 60u);
  EXPECT_EQ(find_pre_tokenizer("no-such-pre"), nullptr);
  EXPECT_EQ(find_pre_tokenizer(""), find_pre_tokenizer("default"));
}

TEST(PreTokenizer, Gpt2Words) {
  const PreTokenizer pre = make("gpt-2");
  EXPECT_EQ(split(pre, "Hello world's 123  x\n\n"),
            (std::vector<std::string>{"Hello", " world", "'s", " 123", " ", " x", "\n\n"}));
}

TEST(PreTokenizer, Llama3GroupsDigitsByThreeAndKeepsNewlinesTogether) {
  const PreTokenizer pre = make("llama-bpe");
  EXPECT_EQ(split(pre, "1234567 I'M\n\n  ok"),
            (std::vector<std::string>{"123", "456", "7", " I", "'M", "\n\n", " ", " ok"}));
}

TEST(PreTokenizer, UnicodeWhitespaceCountsAsWhitespace) {
  // U+0085 (next line) and U+3000 (ideographic space) are Unicode White_Space:
  // "\s+(?!\S)" takes the first U+0085, the second stands alone before "b".
  // Were U+0085 not whitespace, both would form one punctuation-like piece.
  const PreTokenizer pre = make("gpt-2");
  EXPECT_EQ(split(pre,
                  "a\xC2\x85\xC2\x85"
                  "b\xE3\x80\x80"),
            (std::vector<std::string>{"a", "\xC2\x85", "\xC2\x85", "b", "\xE3\x80\x80"}));
}

TEST(PreTokenizer, LongWhitespaceRunsSplitInLinearTime) {
  // deepseek-llm's "\s+$" on a long run of spaces before a non-letter.
  const PreTokenizer pre = make("deepseek-llm");
  const std::string text = std::string(200000, ' ') + "\xE2\x82\xAC";
  const auto pieces = split(pre, text);
  std::string joined;
  for (const auto& p : pieces) joined += p;
  EXPECT_EQ(joined, text);
}

TEST(PreTokenizer, WhitespaceClassesAreExpanded) {
  const std::string expanded = expand_whitespace_classes(R"(\s+(?!\S)|[^\s\p{L}]|\\s)");
  EXPECT_EQ(expanded.find("\\s+"), std::string::npos);
  EXPECT_NE(expanded.find("\\x{85}"), std::string::npos);
  EXPECT_NE(expanded.find("(?![^"), std::string::npos);
  EXPECT_NE(expanded.find("\\\\s"), std::string::npos);  // an escaped backslash stays as it was
}

TEST(Utf8, SequenceLengthRejectsIllFormedBytes) {
  EXPECT_EQ(utf8::sequence_length("a", 0), 1u);
  EXPECT_EQ(utf8::sequence_length("é", 0), 2u);
  EXPECT_EQ(utf8::sequence_length("中", 0), 3u);
  EXPECT_EQ(utf8::sequence_length("🦙", 0), 4u);
  EXPECT_EQ(utf8::sequence_length("\x80", 0), 0u);              // stray continuation
  EXPECT_EQ(utf8::sequence_length("\xC0\xAF", 0), 0u);          // overlong
  EXPECT_EQ(utf8::sequence_length("\xE0\x80\xAF", 0), 0u);      // overlong
  EXPECT_EQ(utf8::sequence_length("\xED\xA0\x80", 0), 0u);      // surrogate
  EXPECT_EQ(utf8::sequence_length("\xF4\x90\x80\x80", 0), 0u);  // beyond U+10FFFF
  EXPECT_EQ(utf8::sequence_length("\xE4\xB8", 0), 0u);          // cut short
  EXPECT_TRUE(utf8::is_incomplete_prefix("\xE4\xB8", 0));
  EXPECT_TRUE(utf8::is_incomplete_prefix("\xF0", 0));
  EXPECT_FALSE(utf8::is_incomplete_prefix("\xED\xA0", 0));  // would be a surrogate
  EXPECT_FALSE(utf8::is_incomplete_prefix("\xFF", 0));
  EXPECT_EQ(utf8::repair("a\xFF"
                         "b\xE4\xB8"),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_TRUE(utf8::is_valid("plain ascii text that is long enough for the fast path"));
  EXPECT_FALSE(utf8::is_valid("plain ascii text that is long enough for the fast path\xFF"));
}

TEST(Utf8, ByteLevelAlphabetIsABijection) {
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = utf8::byte_to_codepoint(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second);
    EXPECT_EQ(utf8::codepoint_to_byte(cp), b);
  }
  EXPECT_EQ(utf8::byte_to_codepoint(' '), 0x120u);   // "Ġ"
  EXPECT_EQ(utf8::byte_to_codepoint('\n'), 0x10Au);  // "Ċ"
  EXPECT_EQ(utf8::byte_to_codepoint('A'), static_cast<uint32_t>('A'));
  EXPECT_EQ(utf8::codepoint_to_byte(0x4E2D), -1);
}

}  // namespace
}  // namespace graft

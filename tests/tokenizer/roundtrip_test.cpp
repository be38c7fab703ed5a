// decode(encode(x)) == x on the upstream inputs and on graft's mixed
// benchmark text, for every bundle vocabulary graft supports.
#include <gtest/gtest.h>

#include "tokenizer/bundle_vocabs.h"
#include "tokenizer/tokenizer.h"
#include "util/files.h"

namespace graft {
namespace {

class RoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(RoundTrip, DecodeGivesBackTheText) {
  auto tok = testing::load_bundle_tokenizer(GetParam());
  if (!tok) {
    EXPECT_EQ(testing::unexpected_load_failure(GetParam(), tok.error()), "");
    std::printf("[ roundtrip] %-20s unsupported: %s\n", GetParam().c_str(), tok.error().message.c_str());
    return;
  }
  std::vector<std::string> texts;
  if (auto cases = testing::read_vectors(GetParam()); cases.ok()) {
    for (auto& c : *cases) texts.push_back(c.text);
  }
  auto mixed = read_file(std::string(GRAFT_SOURCE_DIR) + "/bench/data/mixed.txt");
  ASSERT_TRUE(mixed.ok()) << mixed.error().message;
  texts.push_back(*mixed);

  int exact = 0;
  for (const std::string& text : texts) {
    auto plain = (*tok)->encode(text, /*add_special=*/false, /*parse_special=*/false);
    ASSERT_TRUE(plain.ok());
    auto with_bos = (*tok)->encode(text, /*add_special=*/true, /*parse_special=*/false);
    ASSERT_TRUE(with_bos.ok());
    const bool ok_plain = (*tok)->decode(*plain) == text;
    const bool ok_special = (*tok)->decode(*with_bos, /*skip_special=*/true) == text;
    EXPECT_TRUE(ok_plain) << "'" << escape_piece(text.substr(0, 200)) << "' came back as '"
                          << escape_piece((*tok)->decode(*plain).substr(0, 200)) << "'";
    EXPECT_TRUE(ok_special) << "with BOS/EOS: '" << escape_piece(text.substr(0, 200)) << "'";
    exact += ok_plain && ok_special;
  }
  std::printf("[ roundtrip] %-20s %3d / %3zu texts come back exactly\n", GetParam().c_str(), exact,
              texts.size());
}

INSTANTIATE_TEST_SUITE_P(Bundle, RoundTrip, ::testing::ValuesIn(testing::bundle_vocab_names()),
                         [](const auto& info) {
                           std::string id = info.param;
                           for (char& c : id) c = isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return id;
                         });

}  // namespace
}  // namespace graft

// The upstream tokenizer test vectors: every case of every bundle vocabulary
// graft supports must match token for token (add_special = false,
// parse_special = false, as the vectors were made).
#include <gtest/gtest.h>

#include <cstdio>

#include "testing/test_models.h"
#include "tokenizer/bundle_vocabs.h"
#include "tokenizer/tokenizer.h"

namespace graft {
namespace {

class UpstreamVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(UpstreamVectors, EveryCaseMatches) {
  const std::string name = GetParam();
  auto tok = testing::load_bundle_tokenizer(name);
  if (!tok) {
    EXPECT_EQ(testing::unexpected_load_failure(name, tok.error()), "");
    std::printf("[ vectors  ] %-20s unsupported: %s\n", name.c_str(), tok.error().message.c_str());
    return;
  }
  auto cases = testing::read_vectors(name);
  ASSERT_TRUE(cases.ok()) << cases.error().message;
  ASSERT_FALSE(cases->empty());
  int passed = 0;
  int shown = 0;
  for (const auto& c : *cases) {
    auto ids = (*tok)->encode(c.text, /*add_special=*/false, /*parse_special=*/false);
    ASSERT_TRUE(ids.ok()) << ids.error().message;
    if (*ids == c.ids) {
      ++passed;
    } else if (shown++ < 5) {
      ADD_FAILURE() << name << ": '" << escape_piece(c.text) << "'\n  expected "
                    << testing::ids_to_string(c.ids) << "\n  got      " << testing::ids_to_string(*ids);
    }
  }
  std::printf("[ vectors  ] %-20s %3d / %3zu cases match (%s, pre %s)\n", name.c_str(), passed, cases->size(),
              (*tok)->model_type().c_str(), (*tok)->pre_type().c_str());
  EXPECT_EQ(passed, static_cast<int>(cases->size()));
}

INSTANTIATE_TEST_SUITE_P(Bundle, UpstreamVectors, ::testing::ValuesIn(testing::bundle_vocabs_with_vectors()),
                         [](const auto& info) {
                           std::string id = info.param;
                           for (char& c : id) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return id;
                         });

}  // namespace
}  // namespace graft

// The merge loop's two strategies (a scan for short words, a queue for long
// ones) must agree, and the per-call word cache must not change results.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "tokenizer/bundle_vocabs.h"
#include "tokenizer/merge.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/word_cache.h"
#include "util/files.h"
#include "util/utf8.h"

namespace graft {
namespace {

struct RandomMerges {
  std::map<std::pair<int32_t, int32_t>, MergeStep> steps;
};

RandomMerges make_merges(std::mt19937& rng, int alphabet, int count) {
  RandomMerges m;
  int32_t next_id = alphabet;
  std::vector<int32_t> known;
  for (int32_t i = 0; i < alphabet; ++i) known.push_back(i);
  for (int i = 0; i < count; ++i) {
    const int32_t a = known[rng() % known.size()];
    const int32_t b = known[rng() % known.size()];
    // Few distinct costs, so ties (broken leftmost-first) happen often.
    if (m.steps.emplace(std::make_pair(a, b), MergeStep{static_cast<uint32_t>(rng() % 8), next_id}).second) {
      known.push_back(next_id++);
    }
  }
  return m;
}

std::vector<std::pair<int32_t, uint32_t>> merged(const std::vector<int32_t>& units, const RandomMerges& m,
                                                 size_t scan_limit) {
  std::vector<MergeSymbol> symbols;
  make_chain(
      units.size(), symbols, [](size_t) { return size_t{1}; }, [&](size_t i, size_t) { return units[i]; });
  MergeScratch scratch;
  run_merges(
      symbols,
      [&](const MergeSymbol& l, const MergeSymbol& r) -> std::optional<MergeStep> {
        auto it = m.steps.find({l.id, r.id});
        if (it == m.steps.end()) return std::nullopt;
        return it->second;
      },
      scratch, scan_limit);
  std::vector<std::pair<int32_t, uint32_t>> out;
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.emplace_back(symbols[i].id, symbols[i].length);
  return out;
}

TEST(MergeLoop, ScanAndQueueAgree) {
  std::mt19937 rng(99);
  for (int round = 0; round < 300; ++round) {
    const int alphabet = 2 + static_cast<int>(rng() % 4);
    const RandomMerges m = make_merges(rng, alphabet, 5 + static_cast<int>(rng() % 40));
    std::vector<int32_t> units(1 + rng() % 200);
    for (auto& u : units) u = static_cast<int32_t>(rng() % alphabet);
    const auto by_scan = merged(units, m, /*scan_limit=*/1 << 20);
    const auto by_queue = merged(units, m, /*scan_limit=*/0);
    ASSERT_EQ(by_scan, by_queue) << "round " << round;
    uint32_t total = 0;
    for (const auto& [id, len] : by_scan) total += len;
    EXPECT_EQ(total, units.size());
  }
}

TEST(MergeLoop, FloatOrderKeySortsLikeFloats) {
  const std::vector<float> values = {-1e30f, -3.5f, -1.0f, -0.0f, 0.0f, 1e-20f, 2.0f, 1e30f};
  for (size_t i = 0; i + 1 < values.size(); ++i) {
    EXPECT_LE(float_order_key(values[i]), float_order_key(values[i + 1])) << values[i];
  }
  EXPECT_LT(float_order_key(-3.5f), float_order_key(-1.0f));
  EXPECT_EQ(float_order_key(-0.0f), float_order_key(0.0f));
}

TEST(WordCache, ReplaysEarlierWordsWithoutEncodingAgain) {
  WordCache cache;
  int calls = 0;
  auto encode = [&](std::string_view word, std::vector<TokenId>& out) {
    ++calls;
    for (char c : word) out.push_back(c);
  };
  const std::string text = "alpha beta alpha gamma beta";
  std::vector<TokenId> out;
  std::istringstream words(text);
  std::vector<std::string> kept;
  for (std::string w; words >> w;) kept.push_back(w);
  for (const auto& w : kept) cache.encode(w, out, encode);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(std::string(out.begin(), out.end()), "alphabetaalphagammabeta");
  cache.invalidate();
  cache.encode(kept[0], out, encode);
  EXPECT_EQ(calls, 4);
}

TEST(WordCache, LongTextsTokenizeAsTheirLinesDo) {
  // Lines that start with a letter do not interact across the newline, so a
  // long text (word cache on) must give the concatenated tokens of its
  // lines (each too short for the cache).
  auto mixed = read_file(std::string(GRAFT_SOURCE_DIR) + "/bench/data/mixed.txt");
  ASSERT_TRUE(mixed.ok());
  std::vector<std::string> lines;
  std::istringstream in(*mixed);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && isalpha(static_cast<unsigned char>(line[0]))) lines.push_back(line + "\n");
  }
  std::string text;
  while (text.size() < 20000) {
    for (const auto& l : lines) text += l;
  }
  // (SentencePiece joins "\n" to the next word, so only BPE vocabularies.)
  for (const char* name : {"llama-bpe", "qwen2", "gpt-2", "gemma-4"}) {
    auto tok = testing::load_bundle_tokenizer(name);
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    auto whole = (*tok)->encode(text, false, false);
    ASSERT_TRUE(whole.ok());
    std::vector<TokenId> by_line;
    std::istringstream again(text);
    for (std::string line; std::getline(again, line);) {
      auto ids = (*tok)->encode(line + "\n", false, false);
      ASSERT_TRUE(ids.ok());
      by_line.insert(by_line.end(), ids->begin(), ids->end());
    }
    EXPECT_EQ(*whole, by_line) << name;
  }
}

TEST(Tokenizer, ManyThreadsGetTheSameAnswers) {
  auto mixed = read_file(std::string(GRAFT_SOURCE_DIR) + "/bench/data/mixed.txt");
  ASSERT_TRUE(mixed.ok());
  for (const char* name : {"llama-bpe", "llama-spm"}) {
    auto tok = testing::load_bundle_tokenizer(name);
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    std::vector<std::string> texts;
    // Cut at any byte, so some texts start or end inside a character.
    for (size_t i = 0; i < mixed->size(); i += 500) texts.push_back(mixed->substr(i, 1500));
    texts.push_back(*mixed + *mixed);  // long enough for the word cache
    std::vector<std::vector<TokenId>> expected;
    for (const auto& t : texts) expected.push_back(*(*tok)->encode(t, true, true));
    std::atomic<int> mismatches{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        for (int round = 0; round < 10; ++round) {
          for (size_t i = 0; i < texts.size(); ++i) {
            const size_t k = (i + t) % texts.size();
            auto ids = (*tok)->encode(texts[k], true, true);
            if (!ids.ok() || *ids != expected[k] || (*tok)->decode(*ids, true) != utf8::repair(texts[k])) {
              ++mismatches;
            }
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(mismatches.load(), 0) << name;
  }
}

}  // namespace
}  // namespace graft

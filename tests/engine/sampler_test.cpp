// Each sampling processor's effect on a small hand-made logit vector.
#include "engine/sampler.h"

#include <cmath>
#include <map>
#include <set>

#include <gtest/gtest.h>

namespace graft {
namespace {

// logits of tokens 0..5: token 0 is the most likely, 5 the least.
const std::vector<float> kLogits = {4.0f, 3.0f, 2.0f, 1.0f, 0.0f, -1.0f};

SamplingParams plain(float temperature = 1.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 1234;
  return p;
}

// The set of tokens drawn over many samples.
std::set<TokenId> support(const SamplingParams& params, const std::vector<float>& logits = kLogits,
                          int n = 3000) {
  Sampler s(params, int(logits.size()));
  std::set<TokenId> seen;
  for (int i = 0; i < n; ++i) seen.insert(s.sample(logits.data()));
  return seen;
}

TEST(Sampler, GreedyPicksTheLargestLogit) {
  Sampler s(SamplingParams::greedy(), 6);
  EXPECT_EQ(s.sample(kLogits.data()), 0);
  std::vector<float> other = {0.0f, 0.5f, 9.0f, 1.0f, 0.0f, 0.0f};
  EXPECT_EQ(s.sample(other.data()), 2);
}

TEST(Sampler, LogitBiasChangesTheGreedyChoice) {
  SamplingParams p = SamplingParams::greedy();
  p.logit_bias = {{3, 5.0f}};
  EXPECT_EQ(Sampler(p, 6).sample(kLogits.data()), 3);
  p.logit_bias = {{0, -INFINITY}};
  EXPECT_EQ(Sampler(p, 6).sample(kLogits.data()), 1);
}

TEST(Sampler, RepeatPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplingParams p = SamplingParams::greedy();
  p.repeat_penalty = 2.0f;  // token 0: 4 -> 2, below token 1's 3
  Sampler s(p, 6);
  s.accept(0);
  EXPECT_EQ(s.sample(kLogits.data()), 1);
  // A negative logit grows more negative: -1 -> -2 keeps token 5 below token 4.
  std::vector<float> neg = {-3.0f, -3.0f, -3.0f, -3.0f, -1.5f, -1.0f};
  Sampler t(p, 6);
  t.accept(5);
  EXPECT_EQ(t.sample(neg.data()), 4);
}

TEST(Sampler, PresenceAndFrequencyPenaltiesSubtract) {
  SamplingParams p = SamplingParams::greedy();
  p.frequency_penalty = 0.6f;  // token 0 seen twice: 4 - 1.2 = 2.8 < 3
  Sampler s(p, 6);
  s.accept(0);
  EXPECT_EQ(s.sample(kLogits.data()), 0);  // once: 4 - 0.6 = 3.4 still wins
  s.accept(0);
  EXPECT_EQ(s.sample(kLogits.data()), 1);
  SamplingParams q = SamplingParams::greedy();
  q.presence_penalty = 1.5f;  // 4 - 1.5 = 2.5 < 3
  Sampler t(q, 6);
  t.accept(0);
  EXPECT_EQ(t.sample(kLogits.data()), 1);
}

TEST(Sampler, PenaltyWindowForgetsOldTokens) {
  SamplingParams p = SamplingParams::greedy();
  p.presence_penalty = 1.5f;
  p.penalty_last_n = 2;
  Sampler s(p, 6);
  s.accept(0);
  s.accept(4);
  s.accept(5);  // token 0 has left the window of 2
  EXPECT_EQ(s.sample(kLogits.data()), 0);
}

TEST(Sampler, TopKKeepsTheKMostLikely) {
  SamplingParams p = plain(5.0f);  // a hot temperature reaches every token that survives
  p.top_k = 2;
  EXPECT_EQ(support(p), (std::set<TokenId>{0, 1}));
  p.top_k = 0;
  EXPECT_EQ(support(p).size(), 6u);
}

TEST(Sampler, TopPKeepsTheSmallestHeadReachingP) {
  // softmax(kLogits) = 0.636, 0.234, 0.086, 0.032, 0.012, 0.004
  SamplingParams p = plain(1.0f);
  p.top_p = 0.85f;  // 0.636 + 0.234 = 0.870 >= 0.85
  EXPECT_EQ(support(p), (std::set<TokenId>{0, 1}));
  p.top_p = 0.9f;  // needs the third token
  EXPECT_EQ(support(p), (std::set<TokenId>{0, 1, 2}));
}

TEST(Sampler, MinPDropsTokensFarBelowTheBest) {
  SamplingParams p = plain(5.0f);
  p.min_p = 0.1f;  // p/p_max >= 0.1 <=> logit >= 4 - 2.303: tokens 0, 1 and 2 (logit 2)
  EXPECT_EQ(support(p), (std::set<TokenId>{0, 1, 2}));
}

TEST(Sampler, TypicalPKeepsTokensNearTheEntropy) {
  // Entropy of softmax(kLogits) is ~1.03 nats; surprises: 0.45, 1.45, 2.45, ...
  // The closest are token 1 (|1.45-1.03| = 0.42) and token 0 (0.58); 0.234 + 0.636 >= 0.8.
  SamplingParams p = plain(5.0f);
  p.typical_p = 0.8f;
  EXPECT_EQ(support(p), (std::set<TokenId>{0, 1}));
  p.typical_p = 0.2f;  // token 1 alone reaches 0.2
  EXPECT_EQ(support(p), (std::set<TokenId>{1}));
}

TEST(Sampler, XtcRemovesTheTopChoicesButTheLeastLikelyOfThem) {
  // Tokens 0 and 1 are above the threshold 0.2; XTC keeps only token 1 of them.
  SamplingParams p = plain(1.0f);
  p.top_k = 3;
  p.xtc_probability = 1.0f;
  p.xtc_threshold = 0.2f;
  std::set<TokenId> seen = support(p);
  EXPECT_EQ(seen.count(0), 0u);
  EXPECT_EQ(seen.count(1), 1u);
  EXPECT_EQ(seen.count(2), 1u);
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  auto frequency_of_best = [](float temperature) {
    Sampler s(plain(temperature), 6);
    int best = 0;
    for (int i = 0; i < 4000; ++i) best += s.sample(kLogits.data()) == 0;
    return best / 4000.0;
  };
  const double cold = frequency_of_best(0.25f), normal = frequency_of_best(1.0f),
               hot = frequency_of_best(4.0f);
  EXPECT_GT(cold, 0.97);
  EXPECT_NEAR(normal, 0.636, 0.04);
  EXPECT_LT(hot, 0.4);
}

TEST(Sampler, TheSameSeedGivesTheSameTokens) {
  auto draw = [](uint64_t seed) {
    SamplingParams p = plain(1.5f);
    p.seed = seed;
    Sampler s(p, 6);
    std::vector<TokenId> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(kLogits.data()));
    return out;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
}

TEST(Sampler, LogprobsAreLogSoftmax) {
  Logprobs lp = compute_logprobs(kLogits.data(), 6, 1, 3);
  double z = 0.0;
  for (float l : kLogits) z += std::exp(double(l));
  EXPECT_NEAR(lp.chosen.logprob, 3.0 - std::log(z), 1e-5);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].token, 0);
  EXPECT_EQ(lp.top[1].token, 1);
  EXPECT_EQ(lp.top[2].token, 2);
  EXPECT_NEAR(lp.top[0].logprob, 4.0 - std::log(z), 1e-5);
}

TEST(Sampler, ArgmaxRowsPicksEachRowsBest) {
  std::vector<float> rows = {0, 1, 5, 2, /**/ 9, 1, 2, 3, /**/ 0, 0, 0, 1};
  LogitsView view{rows.data(), 4, 3};
  EXPECT_EQ(argmax_rows(view), (std::vector<TokenId>{2, 0, 3}));
}

}  // namespace
}  // namespace graft

// Sampling: turning a row of logits into the next token. A Sampler holds one
// request's state (penalty window, RNG); the same seed and inputs give the
// same tokens. The processors run in llama.cpp's order: logit bias,
// penalties, top-k, typical-p, top-p, min-p, XTC, temperature, then a draw.
// temperature <= 0 is greedy (after bias and penalties).
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <utility>
#include <vector>

#include "engine/batch.h"
#include "engine/forward.h"

namespace graft {

struct SamplingParams {
  float temperature = 0.8f;  // <= 0: greedy
  int top_k = 40;            // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  float typical_p = 1.0f;    // >= 1: off
  float xtc_probability = 0.0f;
  float xtc_threshold = 0.1f;   // > 0.5: off
  float repeat_penalty = 1.0f;  // 1: off
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int penalty_last_n = 64;  // window of accepted tokens the penalties look at; -1: all
  std::vector<std::pair<TokenId, float>> logit_bias;
  uint64_t seed = 0xFFFFFFFF;

  static SamplingParams greedy() {
    SamplingParams p;
    p.temperature = 0.0f;
    return p;
  }
};

struct TokenLogprob {
  TokenId token = 0;
  float logprob = 0.0f;
};

class Sampler {
 public:
  Sampler(const SamplingParams& params, int n_vocab);

  // Picks the next token from one row of logits (not modified).
  TokenId sample(const float* logits);
  // Records a token of the sequence (prompt or generated) for the penalties.
  void accept(TokenId token);
  void reset();

  const SamplingParams& params() const { return params_; }

 private:
  struct Candidate {
    TokenId id;
    float logit;
    float p;
  };
  void apply_penalties(std::vector<Candidate>& c) const;

  SamplingParams params_;
  int n_vocab_;
  std::mt19937_64 rng_;
  std::deque<TokenId> window_;
  std::vector<Candidate> candidates_;
};

// The log-probability of `chosen` under softmax(logits), and the top_n
// most likely tokens with theirs (for the API's logprobs/top_logprobs).
struct Logprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;
};
Logprobs compute_logprobs(const float* logits, int n_vocab, TokenId chosen, int top_n);

// Greedy choice for every row of a batch's logits in one pass.
std::vector<TokenId> argmax_rows(const LogitsView& logits);
TokenId argmax(const float* logits, int n_vocab);

}  // namespace graft

#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace graft {

namespace {

constexpr uint64_t kRandomSeed = 0xFFFFFFFF;

// Softmax of the candidates' logits into p (candidates need not be sorted).
template <typename C>
void softmax(std::vector<C>& c) {
  if (c.empty()) return;
  float max = c[0].logit;
  for (const auto& x : c) max = std::max(max, x.logit);
  double sum = 0.0;
  for (auto& x : c) {
    x.p = std::exp(x.logit - max);
    sum += x.p;
  }
  for (auto& x : c) x.p = float(x.p / sum);
}

template <typename C>
void sort_descending(std::vector<C>& c) {
  std::sort(c.begin(), c.end(), [](const C& a, const C& b) { return a.logit > b.logit; });
}

}  // namespace

Sampler::Sampler(const SamplingParams& params, int n_vocab) : params_(params), n_vocab_(n_vocab) {
  reset();
}

void Sampler::reset() {
  rng_.seed(params_.seed == kRandomSeed ? std::random_device{}() : params_.seed);
  window_.clear();
}

void Sampler::accept(TokenId token) {
  if (params_.penalty_last_n == 0) return;
  window_.push_back(token);
  if (params_.penalty_last_n > 0) {
    while (int(window_.size()) > params_.penalty_last_n) window_.pop_front();
  }
}

void Sampler::apply_penalties(std::vector<Candidate>& c) const {
  const SamplingParams& p = params_;
  if (window_.empty() ||
      (p.repeat_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f)) {
    return;
  }
  std::vector<std::pair<TokenId, int>> counts;
  for (TokenId t : window_) {
    auto it = std::find_if(counts.begin(), counts.end(), [t](const auto& e) { return e.first == t; });
    if (it == counts.end()) {
      counts.emplace_back(t, 1);
    } else {
      ++it->second;
    }
  }
  // c is indexed by token id here (built in id order, not yet filtered).
  for (const auto& [token, count] : counts) {
    if (token < 0 || token >= int(c.size())) continue;
    float& l = c[size_t(token)].logit;
    l = l <= 0.0f ? l * p.repeat_penalty : l / p.repeat_penalty;
    l -= float(count) * p.frequency_penalty + p.presence_penalty;
  }
}

TokenId Sampler::sample(const float* logits) {
  const SamplingParams& p = params_;
  std::vector<Candidate>& c = candidates_;
  c.resize(size_t(n_vocab_));
  for (int i = 0; i < n_vocab_; ++i) c[size_t(i)] = {i, logits[i], 0.0f};
  for (const auto& [token, bias] : p.logit_bias) {
    if (token >= 0 && token < n_vocab_) c[size_t(token)].logit += bias;
  }
  apply_penalties(c);

  if (p.temperature <= 0.0f) {
    auto best = std::max_element(c.begin(), c.end(),
                                 [](const Candidate& a, const Candidate& b) { return a.logit < b.logit; });
    return best->id;
  }

  // top-k (also sorts what it keeps). The other filters but min-p need the
  // candidates sorted; a full sort of a large vocabulary is skipped when none runs.
  const bool xtc = p.xtc_probability > 0.0f && p.xtc_threshold <= 0.5f;
  if (p.top_k > 0 && p.top_k < int(c.size())) {
    std::partial_sort(c.begin(), c.begin() + p.top_k, c.end(),
                      [](const Candidate& a, const Candidate& b) { return a.logit > b.logit; });
    c.resize(size_t(p.top_k));
  } else if (p.typical_p < 1.0f || p.top_p < 1.0f || p.min_p > 0.0f || xtc) {
    if (p.typical_p >= 1.0f && p.top_p >= 1.0f && !xtc) {
      // min-p alone: drop what it would drop before sorting the rest.
      float best = c[0].logit;
      for (const auto& x : c) best = std::max(best, x.logit);
      const float cut = best + std::log(p.min_p);
      c.erase(std::remove_if(c.begin(), c.end(), [cut](const Candidate& x) { return x.logit < cut; }),
              c.end());
    }
    sort_descending(c);
  }

  // typical-p: keep the tokens whose surprise is closest to the entropy.
  if (p.typical_p < 1.0f && c.size() > 1) {
    softmax(c);
    double entropy = 0.0;
    for (const auto& x : c) entropy -= x.p > 0.0f ? x.p * std::log(double(x.p)) : 0.0;
    std::vector<size_t> order(c.size());
    std::iota(order.begin(), order.end(), 0);
    auto shift = [&](size_t i) { return std::fabs(-std::log(double(c[i].p)) - entropy); };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return shift(a) < shift(b); });
    double cum = 0.0;
    size_t keep = 0;
    for (; keep < order.size(); ++keep) {
      cum += c[order[keep]].p;
      if (cum >= p.typical_p) {
        ++keep;
        break;
      }
    }
    keep = std::max<size_t>(keep, 1);
    std::vector<Candidate> kept;
    for (size_t i = 0; i < keep && i < order.size(); ++i) kept.push_back(c[order[i]]);
    c = std::move(kept);
    sort_descending(c);
  }

  // top-p: the smallest head whose probability reaches p.
  if (p.top_p < 1.0f && c.size() > 1) {
    softmax(c);
    double cum = 0.0;
    size_t keep = c.size();
    for (size_t i = 0; i < c.size(); ++i) {
      cum += c[i].p;
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
    c.resize(std::max<size_t>(keep, 1));
  }

  // min-p: tokens at least min_p times as likely as the best.
  if (p.min_p > 0.0f && c.size() > 1) {
    const float cut = c[0].logit + std::log(p.min_p);
    size_t keep = 1;
    while (keep < c.size() && c[keep].logit >= cut) ++keep;
    c.resize(keep);
  }

  // XTC: sometimes drop every "top choice" above the threshold but the least likely of them.
  if (xtc && c.size() > 1) {
    std::uniform_real_distribution<float> coin(0.0f, 1.0f);
    if (coin(rng_) < p.xtc_probability) {
      softmax(c);
      size_t above = 0;
      while (above < c.size() && c[above].p >= p.xtc_threshold) ++above;
      if (above >= 2) c.erase(c.begin(), c.begin() + long(above - 1));
    }
  }

  for (auto& x : c) x.logit /= p.temperature;
  softmax(c);
  std::uniform_real_distribution<double> draw(0.0, 1.0);
  const double u = draw(rng_);
  double cum = 0.0;
  for (const auto& x : c) {
    cum += x.p;
    if (u < cum) return x.id;
  }
  return c.back().id;
}

Logprobs compute_logprobs(const float* logits, int n_vocab, TokenId chosen, int top_n) {
  float max = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n_vocab; ++i) max = std::max(max, logits[i]);
  double sum = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i] - max));
  const float log_z = max + float(std::log(sum));
  Logprobs out;
  out.chosen = {chosen, (chosen >= 0 && chosen < n_vocab) ? logits[chosen] - log_z : -INFINITY};
  top_n = std::clamp(top_n, 0, n_vocab);
  if (top_n > 0) {
    std::vector<TokenId> ids(static_cast<size_t>(n_vocab));
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + top_n, ids.end(),
                      [&](TokenId a, TokenId b) { return logits[a] > logits[b]; });
    for (int i = 0; i < top_n; ++i) out.top.push_back({ids[size_t(i)], logits[ids[size_t(i)]] - log_z});
  }
  return out;
}

TokenId argmax(const float* logits, int n_vocab) {
  int best = 0;
  float best_value = logits[0];
  for (int i = 1; i < n_vocab; ++i) {
    if (logits[i] > best_value) {
      best_value = logits[i];
      best = i;
    }
  }
  return best;
}

std::vector<TokenId> argmax_rows(const LogitsView& logits) {
  std::vector<TokenId> out(size_t(logits.n_rows));
  for (int r = 0; r < logits.n_rows; ++r) out[size_t(r)] = argmax(logits.row(r), logits.n_vocab);
  return out;
}

}  // namespace graft

#include "engine/scheduler.h"

#include <algorithm>
#include <numeric>

namespace graft {

namespace {

int common_prefix(std::span<const TokenId> a, std::span<const TokenId> b, int cap) {
  int n = static_cast<int>(std::min({a.size(), b.size(), static_cast<size_t>(std::max(cap, 0))}));
  int i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

Scheduler::Scheduler(SchedulerConfig config) : config_(config) {
  config_.max_running = std::max(config_.max_running, 1);
  config_.max_sequences = std::max(config_.max_sequences, config_.max_running);
  config_.step_tokens = std::max(config_.step_tokens, config_.max_running + 1);
  config_.min_prefix = std::max(config_.min_prefix, 1);
  // The budget holds at least one full context (and, for hybrid models, its
  // recurrent state), so that every request the context takes can run once
  // the others are done: it waits, never fails.
  config_.n_ctx = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>(config_.n_ctx, config_.kv_budget - config_.state_cells)));
  for (SeqId s = config_.max_sequences - 1; s >= 0; --s) free_seqs_.push_back(s);
}

int64_t Scheduler::projected(int prompt_tokens, int max_new) const {
  return std::min<int64_t>(int64_t{prompt_tokens} + max_new, config_.n_ctx);
}

Status Scheduler::check_fits(int prompt_tokens, int max_new_tokens) const {
  if (prompt_tokens <= 0) return make_error("invalid_request", "the prompt is empty");
  if (prompt_tokens >= config_.n_ctx) {
    return errorf("context_length_exceeded",
                  "the prompt has {} tokens but the context holds {} (prompt plus at least one new token)",
                  prompt_tokens, config_.n_ctx);
  }
  (void)max_new_tokens;  // generation is cut at the context, which the budget always holds
  return {};
}

void Scheduler::enqueue(RequestId id, std::vector<TokenId> prompt, int max_new_tokens,
                        AdapterRoute adapters) {
  Sequence s;
  s.id = id;
  s.n_prompt = static_cast<int>(prompt.size());
  s.tokens = std::move(prompt);
  s.max_new = max_new_tokens;
  s.reserved = projected(s.n_prompt, max_new_tokens) + config_.state_cells;
  s.adapters = adapters;
  waiting_.push_back(std::move(s));
}

StepPlan Scheduler::plan_step() {
  StepPlan plan;
  while (try_admit(plan)) {
  }
  plan.kv_ops = std::move(pending_ops_);
  pending_ops_.clear();
  add_rows(plan);
  return plan;
}

bool Scheduler::try_admit(StepPlan& plan) {
  if (waiting_.empty() || n_running() >= config_.max_running) return false;
  Sequence& s = waiting_.front();
  if (reserved_ + s.reserved > config_.kv_budget) return false;

  PrefixMatch match;
  if (config_.prefix_cache) match = longest_prefix(s);
  if (match.length < config_.min_prefix) match = PrefixMatch{};
  // Requests that arrive together with the same preamble: the first computes
  // it, the others copy it once it is in KV (this request stays at the head).
  if (config_.prefix_cache && pending_shared_prefix(s) >= match.length + config_.min_wait_gain) return false;

  SeqId seq = -1;
  if (match.from_cache && match.length == static_cast<int>(match.cached->tokens.size())) {
    // The whole cached sequence starts this prompt: take it over as it is
    // (with its snapshots; its state, held as the cache's, is now the running reservation's).
    seq = match.cached->seq;
    cached_cells_ -= static_cast<int64_t>(match.cached->tokens.size());
    s.snapshots = std::move(match.cached->snapshots);
    cache_.erase(match.cached);
  } else {
    const CachedPrefix* keep = match.from_cache ? &*match.cached : nullptr;
    if (!take_free_seq(seq, keep)) return false;
    if (match.length > 0) {
      SeqId src = match.from_cache ? match.cached->seq : match.running->seq;
      pending_ops_.push_back(KvOp{KvOp::Kind::kCopyPrefix, seq, src, match.length});
      if (match.from_cache) cache_.splice(cache_.begin(), cache_, match.cached);
    }
  }
  s.seq = seq;
  // Cached prefixes give way to running requests, least recently used first;
  // then the snapshots running sequences keep.
  auto fits = [&] { return reserved_ + s.reserved + held_cells() <= config_.kv_budget; };
  while (!fits() && !cache_.empty()) evict(std::prev(cache_.end()));
  for (auto r = running_.begin(); !fits() && r != running_.end(); ++r) drop_snapshots(*r);
  if (!fits()) drop_snapshots(s);

  s.n_computed = match.length;
  plan.admitted.push_back(Admission{s.id, seq, match.length});
  reserved_ += s.reserved;
  running_.push_back(std::move(s));
  waiting_.pop_front();
  return true;
}

int Scheduler::usable_prefix(int n, int length, const std::vector<int>& snapshots) const {
  if (n == length) return n;
  // The window before n is still held only while the sequence is within it.
  if (config_.window > 0 && length > window_cells(length)) return 0;
  if (!recurrent()) return n;
  int best = 0;
  for (int at : snapshots) {
    if (at <= n) best = std::max(best, at);
  }
  return best;
}

Scheduler::PrefixMatch Scheduler::longest_prefix(const Sequence& incoming) {
  PrefixMatch best;
  const int cap = incoming.n_prompt - 1;  // the last prompt token is always computed, for its logits
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    if (!(it->adapters == incoming.adapters)) continue;
    const int length = static_cast<int>(it->tokens.size());
    int n = usable_prefix(common_prefix(it->tokens, incoming.tokens, cap), length, it->snapshots);
    bool whole = n == static_cast<int>(it->tokens.size());
    bool best_whole = best.from_cache && best.length == static_cast<int>(best.cached->tokens.size());
    if (n > best.length || (n == best.length && n > 0 && whole && !best_whole)) {
      best = PrefixMatch{n, nullptr, it, true};
    }
  }
  for (const Sequence& r : running_) {
    if (!(r.adapters == incoming.adapters)) continue;
    int n = common_prefix(std::span(r.tokens).first(r.n_computed), incoming.tokens, cap);
    n = usable_prefix(n, r.n_computed, r.snapshots);
    if (n > best.length) best = PrefixMatch{n, &r, {}, false};
  }
  return best;
}

int Scheduler::pending_shared_prefix(const Sequence& incoming) const {
  int best = 0;
  for (const Sequence& r : running_) {
    if (r.n_computed >= r.n_prompt || !(r.adapters == incoming.adapters)) continue;
    int n = common_prefix(std::span(r.tokens).first(r.n_prompt), incoming.tokens, incoming.n_prompt - 1);
    // With a recurrent state, only what ends on a kept state can be reused.
    if (recurrent()) n = config_.state_block > 0 ? n / config_.state_block * config_.state_block : 0;
    // With a sliding window, only a prompt that stays within it keeps the
    // cells a prefix of it needs.
    if (config_.window > 0 && r.n_prompt > window_cells(r.n_prompt)) n = 0;
    best = std::max(best, n);
  }
  return best;
}

bool Scheduler::take_free_seq(SeqId& seq, const CachedPrefix* keep) {
  if (free_seqs_.empty()) {
    for (auto it = cache_.end(); it != cache_.begin();) {
      --it;
      if (&*it == keep) continue;
      evict(it);
      break;
    }
  }
  if (free_seqs_.empty()) return false;
  seq = free_seqs_.back();
  free_seqs_.pop_back();
  return true;
}

void Scheduler::evict(std::list<CachedPrefix>::iterator it) {
  pending_ops_.push_back(KvOp{KvOp::Kind::kFree, it->seq, 0, 0});
  free_seqs_.push_back(it->seq);
  cached_cells_ -= static_cast<int64_t>(it->tokens.size());
  n_snapshots_ -= static_cast<int>(it->snapshots.size());
  cache_.erase(it);
}

int Scheduler::chunk_size(const Sequence& s, int budget) const {
  const int remaining = s.n_prompt - s.n_computed;
  const int chunk = std::min(remaining, budget);
  const int block = config_.state_block;
  if (!recurrent() || block <= 0 || chunk == remaining) return chunk;
  // End on a block boundary, where the state can be kept, unless that would
  // give up more than half of the chunk.
  const int cut = (s.n_computed + chunk) / block * block - s.n_computed;
  return cut > 0 && 2 * cut >= chunk ? cut : chunk;
}

void Scheduler::plan_snapshot(StepPlan& plan, Sequence& s) {
  const int at = s.n_computed;
  if (!recurrent() || config_.state_block <= 0 || at % config_.state_block != 0 || at == 0) return;
  if (std::find(s.snapshots.begin(), s.snapshots.end(), at) != s.snapshots.end()) return;
  // Within the budget and the snapshot slots: older cached prefixes give way.
  while (!cache_.empty() && (n_snapshots_ >= config_.max_snapshots ||
                             reserved_ + held_cells() + config_.state_cells > config_.kv_budget)) {
    evict(std::prev(cache_.end()));
  }
  if (n_snapshots_ >= config_.max_snapshots ||
      reserved_ + held_cells() + config_.state_cells > config_.kv_budget) {
    return;
  }
  s.snapshots.push_back(at);
  ++n_snapshots_;
  plan.snapshots.push_back(s.seq);
}

void Scheduler::drop_snapshots(Sequence& s) {
  if (s.snapshots.empty()) return;
  pending_ops_.push_back(KvOp{KvOp::Kind::kDropSnapshots, s.seq, 0, 0});
  n_snapshots_ -= static_cast<int>(s.snapshots.size());
  s.snapshots.clear();
}

void Scheduler::forget_snapshot(SeqId seq) {
  for (Sequence& s : running_) {
    if (s.seq == seq && !s.snapshots.empty()) {
      s.snapshots.pop_back();
      --n_snapshots_;
    }
  }
}

void Scheduler::add_rows(StepPlan& plan) {
  auto add_row = [&](const Sequence& s, int pos, bool logits) {
    plan.batch.rows.push_back(BatchRow{s.tokens[pos], pos, s.seq, logits, s.adapters});
    if (logits) plan.samplers.push_back(s.id);
  };
  // One decode row per request that has a sampled token not yet in KV.
  int budget = config_.step_tokens;
  for (Sequence& s : running_) {
    if (s.n_computed >= s.n_prompt && s.n_computed == static_cast<int>(s.tokens.size()) - 1) {
      add_row(s, s.n_computed, true);
      plan.scheduled.push_back(s.id);
      ++s.n_computed;
      --budget;
    }
  }
  // Prompt chunks in admission order, one prompt per step: a step's time
  // grows with its rows, so prompts read one after another give the first
  // its first token after its own prompt rather than after all of them (the
  // last comes a little later: smaller steps use the CPU a little less
  // well). The exception is steps that stay small (kSmallStep rows), whose
  // time is mostly reading the weights, whatever their rows: short prompts
  // share those.
  constexpr int kSmallStep = 16;
  bool prefilled = false;
  for (Sequence& s : running_) {
    if (budget <= 0) break;
    int remaining = s.n_prompt - s.n_computed;
    if (remaining <= 0) continue;
    if (prefilled && (remaining > budget || int(plan.batch.rows.size()) + remaining > kSmallStep)) break;
    int chunk = chunk_size(s, budget);
    for (int i = 0; i < chunk; ++i) {
      int pos = s.n_computed + i;
      add_row(s, pos, pos == s.n_prompt - 1);
    }
    s.n_computed += chunk;
    budget -= chunk;
    plan_snapshot(plan, s);
    if (plan.scheduled.empty() || plan.scheduled.back() != s.id) plan.scheduled.push_back(s.id);
    prefilled = true;
  }
}

void Scheduler::append_token(RequestId id, TokenId token) {
  for (Sequence& s : running_) {
    if (s.id == id) {
      s.tokens.push_back(token);
      return;
    }
  }
}

void Scheduler::release(RequestId id, bool keep_prefix) {
  auto w = std::find_if(waiting_.begin(), waiting_.end(), [&](const Sequence& s) { return s.id == id; });
  if (w != waiting_.end()) {
    waiting_.erase(w);
    return;
  }
  auto r = std::find_if(running_.begin(), running_.end(), [&](const Sequence& s) { return s.id == id; });
  if (r == running_.end()) return;
  reserved_ -= r->reserved;
  if (keep_prefix && config_.prefix_cache && r->n_computed >= config_.min_prefix) {
    std::span<const TokenId> kv(r->tokens.data(), r->n_computed);
    // A cached prefix this sequence extends is now redundant (with a
    // recurrent state, only if this one keeps a state at its length).
    for (auto it = cache_.begin(); it != cache_.end();) {
      auto next = std::next(it);
      const int length = static_cast<int>(it->tokens.size());
      if (it->adapters == r->adapters && it->tokens.size() <= kv.size() &&
          std::equal(it->tokens.begin(), it->tokens.end(), kv.begin()) &&
          usable_prefix(length, r->n_computed, r->snapshots) == length) {
        evict(it);
      }
      it = next;
    }
    r->tokens.resize(r->n_computed);
    cached_cells_ += r->n_computed;
    cache_.push_front(CachedPrefix{r->seq, std::move(r->tokens), r->adapters, std::move(r->snapshots)});
  } else {
    pending_ops_.push_back(KvOp{KvOp::Kind::kFree, r->seq, 0, 0});
    free_seqs_.push_back(r->seq);
    n_snapshots_ -= static_cast<int>(r->snapshots.size());
  }
  running_.erase(r);
}

void Scheduler::drop_cached_if(const std::function<bool(const AdapterRoute&)>& pred) {
  for (auto it = cache_.begin(); it != cache_.end();) {
    auto next = std::next(it);
    if (pred(it->adapters)) evict(it);
    it = next;
  }
}

bool Scheduler::is_waiting(RequestId id) const {
  return std::any_of(waiting_.begin(), waiting_.end(), [&](const Sequence& s) { return s.id == id; });
}

int64_t Scheduler::running_tokens() const {
  int64_t n = 0;
  for (const Sequence& s : running_) n += s.n_computed;
  return n;
}

int64_t Scheduler::running_window_cells() const {
  int64_t n = 0;
  if (config_.window <= 0) return n;
  for (const Sequence& s : running_) n += window_cells(s.n_computed);
  return n;
}

int64_t Scheduler::cached_window_cells() const {
  int64_t n = 0;
  if (config_.window <= 0) return n;
  for (const CachedPrefix& c : cache_) n += window_cells(static_cast<int64_t>(c.tokens.size()));
  return n;
}

int64_t Scheduler::cached_tokens() const {
  return cached_cells_;
}

int64_t Scheduler::pending_prompt_tokens() const {
  int64_t n = 0;
  for (const Sequence& s : waiting_) n += s.n_prompt;
  for (const Sequence& s : running_) n += std::max(0, s.n_prompt - s.n_computed);
  return n;
}

}  // namespace graft

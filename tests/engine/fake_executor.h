// A fake model for engine and server tests. Its "next token" is a hash of the
// whole sequence so far (so a wrong position, a lost token or a wrong prefix
// copy changes the output), and it checks every row the way a real KV cache
// does: sequence ids in range, positions continuing their sequence, room left.
// Token ids 1..n_vocab-1 read as letters; id 0 is end-of-generation.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/executor.h"

namespace graft::testing {

inline TokenId fake_next_token(const std::vector<TokenId>& seq, int n_vocab, int eog_every) {
  uint64_t h = 1469598103934665603ull;
  for (TokenId t : seq) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
  if (eog_every > 0 && (h >> 7) % eog_every == 0) return 0;
  return 1 + static_cast<TokenId>((h >> 17) % static_cast<uint64_t>(n_vocab - 1));
}

class FakeExecutor : public Executor {
 public:
  struct Options {
    int n_ctx = 256;
    int n_vocab = 27;
    int max_sequences = 8;
    int64_t kv_cells = 1024;
    int max_batch_rows = 512;
    int eog_every = 0;  // > 0: about one sampled token in eog_every is end-of-generation
    std::chrono::milliseconds step_delay{0};
  };

  explicit FakeExecutor(Options options) : options_(options) {
    limits_.n_ctx = options.n_ctx;
    limits_.n_vocab = options.n_vocab;
    limits_.max_sequences = options.max_sequences;
    limits_.kv_cells = options.kv_cells;
    limits_.kv_bytes_per_token = 100;
    limits_.max_batch_rows = options.max_batch_rows;
  }

  // The tokens a request gets alone: what every batched run must match.
  static std::vector<TokenId> expected(std::vector<TokenId> prompt, int n, int n_vocab, int eog_every = 0) {
    std::vector<TokenId> out;
    for (int i = 0; i < n; ++i) {
      TokenId t = fake_next_token(prompt, n_vocab, eog_every);
      out.push_back(t);
      if (t == 0) break;
      prompt.push_back(t);
    }
    return out;
  }

  const ExecutorLimits& limits() const override { return limits_; }

  Result<std::unique_ptr<RowSampler>> new_sampler(const SamplingOptions& options, std::span<const TokenId>,
                                                  int top_logprobs) override {
    if (options.temperature < 0) return make_error("invalid_request", "negative temperature");
    auto s = std::make_unique<Sampler>();
    s->top_logprobs = top_logprobs;
    return std::unique_ptr<RowSampler>(std::move(s));
  }

  Result<std::vector<RowResult>> step(const Batch& batch, std::span<RowSampler* const> samplers) override {
    if (options_.step_delay.count() > 0) std::this_thread::sleep_for(options_.step_delay);
    std::lock_guard lock(mutex_);
    steps_++;
    max_rows_seen_ = std::max<int>(max_rows_seen_, static_cast<int>(batch.size()));
    row_counts_.push_back(static_cast<int>(batch.size()));
    if (fail_steps_ > 0) {
      fail_steps_--;
      return make_error("internal", "injected failure");
    }
    if (throw_steps_ > 0) {
      throw_steps_--;
      throw std::runtime_error("injected exception");
    }
    if (static_cast<int>(batch.size()) > limits_.max_batch_rows)
      return make_error("internal", "too many rows");
    // Validate every row before changing anything (like the real cache).
    std::map<SeqId, int> lengths;
    int64_t used = cells_used_locked();
    for (const BatchRow& row : batch.rows) {
      if (row.seq < 0 || row.seq >= limits_.max_sequences) return errorf("internal", "bad seq {}", row.seq);
      if (row.token < 0 || row.token >= limits_.n_vocab) return errorf("internal", "bad token {}", row.token);
      int& len = lengths.try_emplace(row.seq, static_cast<int>(seqs_[row.seq].size())).first->second;
      if (row.pos != len)
        return errorf("internal", "seq {}: row at pos {} but the sequence has {}", row.seq, row.pos, len);
      if (row.pos >= limits_.n_ctx)
        return errorf("internal", "seq {}: pos {} beyond the context", row.seq, row.pos);
      ++len;
      if (++used > limits_.kv_cells) return make_error("internal", "KV cache full");
    }
    std::vector<RowResult> out;
    size_t s = 0;
    for (const BatchRow& row : batch.rows) {
      seqs_[row.seq].push_back(row.token);
      if (!row.logits) continue;
      if (s >= samplers.size()) return make_error("internal", "more logits rows than samplers");
      auto* sampler = static_cast<Sampler*>(samplers[s++]);
      if (row_fails_ && row_fails_(seqs_[row.seq])) {
        out.push_back(make_error("compute_failed", "injected row failure"));
        continue;
      }
      GeneratedToken g;
      g.id = fake_next_token(seqs_[row.seq], limits_.n_vocab, options_.eog_every);
      if (sampler->top_logprobs >= 0) {
        g.logprob = -0.25f;
        for (int k = 0; k < sampler->top_logprobs; ++k) {
          g.top.push_back(LogprobEntry{(g.id + k) % limits_.n_vocab, -0.25f * (k + 1)});
        }
      }
      out.push_back(g);
    }
    if (s != samplers.size()) return make_error("internal", "fewer logits rows than samplers");
    if (after_step_) after_step_();
    return out;
  }

  void seq_free(SeqId seq) override {
    std::lock_guard lock(mutex_);
    seqs_.erase(seq);
  }
  void seq_truncate(SeqId seq, int n) override {
    std::lock_guard lock(mutex_);
    if (static_cast<int>(seqs_[seq].size()) > n) seqs_[seq].resize(n);
  }
  Status seq_copy_prefix(SeqId src, SeqId dst, int n) override {
    std::lock_guard lock(mutex_);
    if (!seqs_[dst].empty()) return errorf("internal", "copy into non-empty seq {}", dst);
    if (static_cast<int>(seqs_[src].size()) < n)
      return errorf("internal", "seq {} is shorter than {}", src, n);
    seqs_[dst].assign(seqs_[src].begin(), seqs_[src].begin() + n);
    copies_++;
    return {};
  }

  // Inspection (any thread).
  int64_t cells_used() const {
    std::lock_guard lock(mutex_);
    return cells_used_locked();
  }
  int steps() const {
    std::lock_guard lock(mutex_);
    return steps_;
  }
  int copies() const {
    std::lock_guard lock(mutex_);
    return copies_;
  }
  int max_rows_seen() const {
    std::lock_guard lock(mutex_);
    return max_rows_seen_;
  }
  void fail_next_steps(int n) {
    std::lock_guard lock(mutex_);
    fail_steps_ = n;
  }
  void throw_in_next_steps(int n) {
    std::lock_guard lock(mutex_);
    throw_steps_ = n;
  }
  // The logits row of every sequence (its tokens so far) that matches fails alone.
  void fail_rows_where(std::function<bool(const std::vector<TokenId>&)> pred) {
    std::lock_guard lock(mutex_);
    row_fails_ = std::move(pred);
  }
  // Called on the engine thread after each successful step.
  void set_after_step(std::function<void()> fn) {
    std::lock_guard lock(mutex_);
    after_step_ = std::move(fn);
  }

 private:
  struct Sampler : RowSampler {
    int top_logprobs = -1;
  };
  int64_t cells_used_locked() const {
    int64_t n = 0;
    for (auto& [seq, tokens] : seqs_) n += static_cast<int64_t>(tokens.size());
    return n;
  }

  Options options_;
  ExecutorLimits limits_;
  mutable std::mutex mutex_;
  std::map<SeqId, std::vector<TokenId>> seqs_;
  int steps_ = 0;
  int copies_ = 0;
  int max_rows_seen_ = 0;
  int fail_steps_ = 0;
  int throw_steps_ = 0;
  std::function<bool(const std::vector<TokenId>&)> row_fails_;
  std::vector<int> row_counts_;
  std::function<void()> after_step_;
};

// Token id t (1..26) reads as the letter 'a' + t - 1; 0 is end-of-generation.
class FakeTokenText : public TokenText {
 public:
  static std::string piece(TokenId t) {
    return t == 0 ? "" : std::string(1, static_cast<char>('a' + (t - 1) % 26));
  }
  static std::string text_of(const std::vector<TokenId>& tokens) {
    std::string s;
    for (TokenId t : tokens) s += piece(t);
    return s;
  }
  bool is_end_of_generation(TokenId token) const override { return token == 0; }
  std::unique_ptr<TextStream> open_stream(bool) const override { return std::make_unique<Stream>(); }

 private:
  struct Stream : TextStream {
    std::string push(TokenId token) override { return piece(token); }
    std::string flush() override { return {}; }
  };
};

}  // namespace graft::testing

#include "engine/model_executor.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

#include "engine/forward.h"
#include "engine/kv_cache.h"
#include "engine/sampler.h"

namespace graft {

namespace {

SamplingParams to_params(const SamplingOptions& o) {
  SamplingParams p;
  p.temperature = o.temperature;
  p.top_k = o.top_k;
  p.top_p = o.top_p;
  p.min_p = o.min_p;
  p.typical_p = o.typical_p;
  p.xtc_probability = o.xtc_probability;
  p.xtc_threshold = o.xtc_threshold;
  p.repeat_penalty = o.repetition_penalty;
  p.presence_penalty = o.presence_penalty;
  p.frequency_penalty = o.frequency_penalty;
  p.penalty_last_n = o.penalty_last_n;
  for (const auto& [token, bias] : o.logit_bias) p.logit_bias.emplace_back(token, bias);
  // A fixed seed when asked for; otherwise a fresh one (the sampler treats
  // 0xFFFFFFFF as "random").
  p.seed = o.has_seed ? o.seed : 0xFFFFFFFF;
  return p;
}

class ModelSampler : public RowSampler {
 public:
  ModelSampler(const SamplingParams& params, int n_vocab, int top_logprobs)
      : sampler(params, n_vocab), top_logprobs(top_logprobs) {
    const auto& p = params;
    plain_greedy = p.temperature <= 0.0f && p.logit_bias.empty() && p.repeat_penalty == 1.0f &&
                   p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f;
  }
  Sampler sampler;
  int top_logprobs;
  bool plain_greedy;  // argmax of the raw logits: no need to build candidates
};

// One row's token; a row whose logits are not all finite (or whose sampler
// throws) fails alone.
RowResult sample_row(ModelSampler& s, const float* row, int n_vocab) {
  if (!std::all_of(row, row + n_vocab, [](float x) { return std::isfinite(x); })) {
    return make_error("compute_failed", "the model computed non-finite logits for this request");
  }
  GeneratedToken out;
  try {
    out.id = s.plain_greedy ? argmax(row, n_vocab) : s.sampler.sample(row);
    s.sampler.accept(out.id);
    if (s.top_logprobs >= 0) {
      Logprobs lp = compute_logprobs(row, n_vocab, out.id, s.top_logprobs);
      out.logprob = lp.chosen.logprob;
      for (const auto& t : lp.top) out.top.push_back(LogprobEntry{t.token, t.logprob});
    }
  } catch (const std::exception& e) {
    return errorf("internal", "sampling failed: {}", e.what());
  }
  return out;
}

class ModelExecutor : public Executor {
 public:
  ModelExecutor(Model& model, std::unique_ptr<KvCache> cache, int n_threads, const ExecutorLimits& limits)
      : model_(model), cache_(std::move(cache)), forward_(model_, *cache_, n_threads), limits_(limits) {}

  // The compute buffer for the largest batch, up front: otherwise each
  // batch larger than all before reallocates it (and faults in new pages).
  Status reserve() {
    return forward_.reserve(limits_.max_batch_rows, std::min(limits_.max_batch_rows, limits_.max_sequences));
  }

  const ExecutorLimits& limits() const override { return limits_; }

  Result<std::unique_ptr<RowSampler>> new_sampler(const SamplingOptions& options,
                                                  std::span<const TokenId> prompt,
                                                  int top_logprobs) override {
    for (const auto& [token, bias] : options.logit_bias) {
      if (token < 0 || token >= limits_.n_vocab) {
        return errorf("invalid_request", "logit_bias names token {} outside the vocabulary (0..{})", token,
                      limits_.n_vocab - 1);
      }
    }
    auto s = std::make_unique<ModelSampler>(to_params(options), limits_.n_vocab, top_logprobs);
    int window = options.penalty_last_n < 0 ? static_cast<int>(prompt.size()) : options.penalty_last_n;
    size_t first = prompt.size() - std::min(prompt.size(), static_cast<size_t>(std::max(window, 0)));
    for (size_t i = first; i < prompt.size(); ++i) s->sampler.accept(prompt[i]);
    return std::unique_ptr<RowSampler>(std::move(s));
  }

  Result<std::vector<RowResult>> step(const Batch& batch, std::span<RowSampler* const> samplers) override {
    GRAFT_TRY(LogitsView logits, forward_.run(batch));
    if (logits.n_rows != static_cast<int>(samplers.size())) {
      return errorf("internal", "{} logits rows for {} samplers", logits.n_rows, samplers.size());
    }
    std::vector<RowResult> out;
    out.reserve(samplers.size());
    for (size_t i = 0; i < samplers.size(); ++i) {
      out.push_back(sample_row(*static_cast<ModelSampler*>(samplers[i]), logits.row(static_cast<int>(i)),
                               logits.n_vocab));
    }
    return out;
  }

  void seq_free(SeqId seq) override { cache_->seq_free(seq); }
  void seq_truncate(SeqId seq, int n_tokens) override { cache_->seq_truncate(seq, n_tokens); }
  Status seq_copy_prefix(SeqId src, SeqId dst, int n_tokens) override {
    return cache_->seq_copy_prefix(src, dst, n_tokens);
  }
  Status seq_snapshot(SeqId seq) override { return cache_->seq_snapshot(seq); }
  void seq_drop_snapshots(SeqId seq) override { cache_->seq_drop_snapshots(seq); }

 private:
  Model& model_;
  std::unique_ptr<KvCache> cache_;
  Forward forward_;
  ExecutorLimits limits_;
};

}  // namespace

Result<std::unique_ptr<Executor>> make_model_executor(Model& model, const ModelExecutorOptions& options) {
  const ModelConfig& config = model.config();
  ExecutorLimits limits;
  limits.n_ctx = config.n_ctx_train > 0 ? std::min(options.n_ctx, config.n_ctx_train) : options.n_ctx;
  limits.n_vocab = config.n_vocab;
  limits.max_sequences = std::min(options.max_sequences, KvCache::kMaxSequences);
  limits.kv_cells = options.kv_cells;
  limits.max_batch_rows = options.max_batch_rows;
  if (limits.n_ctx < 2) return errorf("invalid_argument", "the context must hold at least 2 tokens");
  if (options.kv_cells < limits.n_ctx) {
    return errorf("invalid_argument",
                  "the KV cache ({} tokens) must hold at least one full context ({} tokens)",
                  options.kv_cells, limits.n_ctx);
  }
  KvCacheOptions kv;
  kv.n_cells = static_cast<int>(std::min<int64_t>(options.kv_cells, INT32_MAX));
  kv.type = options.kv_type;
  const KvSplit split = split_kv_budget(config, kv.type, options.kv_cells, limits.n_ctx, limits.max_sequences,
                                        options.max_batch_rows);
  if (split.local_cells > 0) {
    kv.n_cells = static_cast<int>(std::min<int64_t>(split.global_cells, INT32_MAX));
    kv.n_local_cells = static_cast<int>(std::min<int64_t>(split.local_cells, INT32_MAX));
    limits.max_sequences = split.max_sequences;
    limits.kv_cells = kv.n_cells;
    limits.sliding_window = config.sliding_window;
    limits.local_cells = kv.n_local_cells;
  }
  kv.n_seq_max = limits.max_sequences;
  if (config.has_recurrent_layers()) {
    kv.n_state_snapshots = options.state_snapshots;
    if (kv.n_state_snapshots < 0) {
      const int64_t budget_bytes = options.kv_cells * int64_t(kv_bytes_per_token(config, kv.type));
      kv.n_state_snapshots =
          int(std::clamp<int64_t>(budget_bytes / int64_t(recurrent_state_bytes(config)), 0, 64));
    }
  }
  GRAFT_TRY(std::unique_ptr<KvCache> cache, KvCache::create(config, kv));
  limits.kv_bytes_per_token = static_cast<int64_t>(cache->bytes_per_token());
  limits.local_bytes_per_cell = static_cast<int64_t>(cache->local_bytes_per_cell());
  if (const RecurrentState* state = cache->recurrent()) {
    limits.state_bytes = static_cast<int64_t>(state->bytes_per_state());
    limits.max_state_snapshots = state->n_snapshots_max();
  }
  int threads =
      options.n_threads > 0 ? options.n_threads : static_cast<int>(std::thread::hardware_concurrency());
  auto executor = std::make_unique<ModelExecutor>(model, std::move(cache), std::max(threads, 1), limits);
  GRAFT_TRY_STATUS(executor->reserve());
  return std::unique_ptr<Executor>(std::move(executor));
}

}  // namespace graft

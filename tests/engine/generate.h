// Test helpers: greedy generation through Forward, one sequence or many.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/forward.h"
#include "engine/kv_cache.h"
#include "engine/sampler.h"
#include "model/model.h"

namespace graft::testing {

struct Engine {
  std::unique_ptr<Model> model;
  std::unique_ptr<KvCache> cache;
  std::unique_ptr<Forward> forward;
};

// Sliding-window models keep their sliding-window layers' cells in a pool of
// their own, as the server does, of local_cells cells (-1: a window per
// sequence and 256 rows; 0: no such pool).
inline Engine open_engine(const std::string& path, int n_cells = 1024, int n_seq = 16, int n_threads = 2,
                          ggml_type kv_type = GGML_TYPE_F16, int local_cells = -1) {
  Engine e;
  auto model = Model::load(path);
  EXPECT_TRUE(model.ok()) << (model.ok() ? "" : model.error().message);
  if (!model.ok()) return e;
  e.model = std::move(*model);
  KvCacheOptions options;
  options.n_cells = n_cells;
  options.n_seq_max = n_seq;
  options.n_state_snapshots = 4;  // hybrid models
  options.type = kv_type;
  const ModelConfig& c = e.model->config();
  if (local_cells < 0 && sliding_kv_bytes_per_token(c, options.type) > 0 &&
      sliding_kv_bytes_per_token(c, options.type) < kv_bytes_per_token(c, options.type)) {
    local_cells = n_seq * (c.sliding_window - 1) + 256;
  }
  options.n_local_cells = std::max(local_cells, 0);
  auto cache = KvCache::create(e.model->config(), options);
  EXPECT_TRUE(cache.ok());
  e.cache = std::move(*cache);
  e.forward = std::make_unique<Forward>(*e.model, *e.cache, n_threads);
  return e;
}

// Greedy continuation of `prompt` in sequence `seq`: the prompt in batches
// of the given sizes (the rest in one more), then one row per step. Also
// returns each step's logits if asked.
inline std::vector<TokenId> greedy_in_batches(Engine& e, const std::vector<TokenId>& prompt,
                                              const std::vector<int>& prompt_batches, int n, SeqId seq = 0,
                                              std::vector<std::vector<float>>* logits = nullptr,
                                              AdapterRoute route = {}) {
  std::vector<TokenId> out;
  Batch batch;
  int pos = e.cache->seq_length(seq);
  size_t next_batch = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    batch.rows.push_back({prompt[i], pos++, seq, i + 1 == prompt.size(), route});
    if (next_batch < prompt_batches.size() && int(batch.rows.size()) == prompt_batches[next_batch] &&
        i + 1 < prompt.size()) {
      ++next_batch;
      auto result = e.forward->run(batch);
      EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().message);
      if (!result.ok()) return out;
      batch.clear();
    }
  }
  for (int step = 0; step < n; ++step) {
    auto result = e.forward->run(batch);
    EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().message);
    if (!result.ok()) return out;
    const LogitsView& view = *result;
    if (logits) logits->emplace_back(view.row(0), view.row(0) + view.n_vocab);
    TokenId next = argmax(view.row(0), view.n_vocab);
    out.push_back(next);
    batch.rows.assign(1, {next, pos++, seq, true, route});
  }
  return out;
}

// The same with the whole prompt as one batch (or in batches of `chunk` rows).
inline std::vector<TokenId> greedy(Engine& e, const std::vector<TokenId>& prompt, int n, SeqId seq = 0,
                                   std::vector<std::vector<float>>* logits = nullptr, AdapterRoute route = {},
                                   int chunk = 0) {
  std::vector<int> batches;
  for (size_t done = 0; chunk > 0 && done + size_t(chunk) < prompt.size(); done += size_t(chunk))
    batches.push_back(chunk);
  return greedy_in_batches(e, prompt, batches, n, seq, logits, route);
}

// The batches llama-server reads a prompt of n tokens in: one, except for a
// model with sliding-window layers: to checkpoint its cache (whose windows
// cannot be rolled back) it ends a batch 4 + 512 (its n_ubatch) tokens and 4
// tokens before the prompt's end. The batches matter to the last bits: ggml's CPU
// flash attention takes rows of a batch of 64 or more through its tiled
// kernel (values summed in F32) and those of a smaller one row by row (in F16
// for an F16 cache), and a one-row product goes through vec_dot rather than
// tinyBLAS; through Q8_0 activations that can change a greedy token.
inline std::vector<int> server_prompt_batches(const Model& model, size_t n) {
  std::vector<int> batches;
  if (!model.config().has_sliding_layers()) return batches;
  size_t done = 0;
  for (size_t before_end : {size_t(4 + 512), size_t(4)}) {
    if (n > before_end && n - before_end > done) {
      batches.push_back(int(n - before_end - done));
      done = n - before_end;
    }
  }
  return batches;
}

}  // namespace graft::testing

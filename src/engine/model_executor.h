// The real Executor: a loaded Model, a KvCache and Forward on ggml's CPU
// backend, and one Sampler per request.
#pragma once

#include <memory>

#include <ggml.h>

#include "engine/executor.h"
#include "model/model.h"

namespace graft {

struct ModelExecutorOptions {
  int n_ctx = 4096;  // longest sequence (capped by the model's training context)
  // KV cache size in tokens, over all sequences. Sliding-window models turn
  // the memory of that many tokens into more: their sliding-window layers
  // keep only each sequence's window (split_kv_budget), the rest holds more
  // tokens of the other layers.
  int64_t kv_cells = 16384;
  int max_sequences = 16;  // KV sequence ids (running requests plus cached prefixes)
  int n_threads = 0;       // 0: all cores
  ggml_type kv_type = GGML_TYPE_F16;
  int max_batch_rows = 512;
  // Hybrid models: recurrent state snapshots held at once (-1: as many as
  // the KV budget's bytes hold, at most 64).
  int state_snapshots = -1;
};

// The model must outlive the executor. Errors: the KV cache does not fit.
Result<std::unique_ptr<Executor>> make_model_executor(Model& model, const ModelExecutorOptions& options);

}  // namespace graft

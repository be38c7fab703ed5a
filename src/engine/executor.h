// Executor: what the engine needs from the model side, and nothing more. The
// scheduler decides, the executor executes: it runs one batch through the
// model and samples one token per logits row, and it edits KV sequences. The
// engine thread is its only caller. Tests drive the engine with a fake one;
// `make_model_executor` (model_executor.h) is the real one.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/batch.h"
#include "engine/request.h"
#include "util/result.h"

namespace graft {

struct ExecutorLimits {
  int n_ctx = 0;  // longest sequence (prompt + generated) the KV cache holds
  int n_vocab = 0;
  int max_sequences = 0;  // KV sequence ids 0 .. max_sequences-1
  int64_t kv_cells = 0;   // tokens the KV cache holds over all sequences
  int64_t kv_bytes_per_token = 0;
  int max_batch_rows = 0;  // most rows one step may carry
  // Hybrid models: bytes of one sequence's recurrent state (0: the model
  // keeps none) and the most state snapshots held at once.
  int64_t state_bytes = 0;
  int max_state_snapshots = 0;
  // Sliding-window models whose sliding-window layers keep their cells in a
  // pool of their own: the window (0: no such pool), that pool's cells and
  // bytes per cell. kv_cells and kv_bytes_per_token are then the other
  // layers'; a sequence holds at most sliding_window - 1 cells of the pool
  // between steps, and max_sequences of them with one batch's rows fit it.
  int sliding_window = 0;
  int64_t local_cells = 0;
  int64_t local_bytes_per_cell = 0;
};

// What one logits row of a step gives: the sampled token, or why there is none.
using RowResult = Result<GeneratedToken>;

// One request's sampling state (penalty history, random generator).
class RowSampler {
 public:
  virtual ~RowSampler() = default;
};

class Executor {
 public:
  virtual ~Executor() = default;

  virtual const ExecutorLimits& limits() const = 0;

  // A sampler for one request; `prompt` seeds the penalty history.
  // `top_logprobs` < 0: no logprobs.
  virtual Result<std::unique_ptr<RowSampler>> new_sampler(const SamplingOptions& options,
                                                          std::span<const TokenId> prompt,
                                                          int top_logprobs) = 0;

  // Runs the batch and samples one token for each row with logits, in row
  // order, with samplers[i] for the i-th such row. The sampled token is
  // accepted into that sampler's history. An error for the whole step fails
  // every request in it; a row that cannot give a token (non-finite logits,
  // a sampler that failed) says so in its own entry, and ends only its request.
  virtual Result<std::vector<RowResult>> step(const Batch& batch, std::span<RowSampler* const> samplers) = 0;

  // KV sequence edits (between steps).
  virtual void seq_free(SeqId seq) = 0;
  virtual void seq_truncate(SeqId seq, int n_tokens) = 0;
  // Makes dst's first n tokens those of src (dst must be empty). With a
  // recurrent state, n must be src's length or a length it has a snapshot at.
  virtual Status seq_copy_prefix(SeqId src, SeqId dst, int n_tokens) = 0;
  // Hybrid models: keeps the sequence's recurrent state at its current length
  // as a snapshot; drops all of its snapshots.
  virtual Status seq_snapshot(SeqId) { return make_error("internal", "the model keeps no recurrent state"); }
  virtual void seq_drop_snapshots(SeqId) {}
};

// How generated tokens become text.
class TextStream {
 public:
  virtual ~TextStream() = default;
  // The text that token completes (only whole UTF-8 characters; invalid
  // bytes become U+FFFD).
  virtual std::string push(TokenId token) = 0;
  // Whatever is still held back, at the end of generation.
  virtual std::string flush() = 0;
};

class TokenText {
 public:
  virtual ~TokenText() = default;
  // End-of-generation tokens (EOS, end of turn).
  virtual bool is_end_of_generation(TokenId token) const = 0;
  // special: control tokens show as their text (e.g. "[TOOL_CALLS]");
  // otherwise they are left out.
  virtual std::unique_ptr<TextStream> open_stream(bool special) const = 0;
};

}  // namespace graft

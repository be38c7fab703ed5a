// KvCache: the keys and values of many sequences at once, in one pool of
// cells per layer (F16 by default, Q8_0 as an option). A cell holds one
// position and may belong to several sequences at once, so copying a prefix
// from one sequence to another shares cells instead of copying data.
// Rows attend only to cells of their own sequence at positions <= theirs.
//
// For hybrid models (qwen35) it also holds each sequence's recurrent state
// (engine/recurrent_state.h) beside its cells, and snapshots of it: cells and
// state are freed, truncated and copied together. A state cannot be cut back,
// so a prefix copy or truncation to n tokens needs the source's state at
// exactly n tokens: its whole length, or a snapshot taken there.
//
// For models with sliding-window layers (gemma3) it can keep those layers'
// cells in a pool of their own (KvCacheOptions::n_local_cells). A sequence
// keeps there only the cells its next row's window needs (its last
// sliding_window - 1 positions): a batch places each row in both pools, and
// once it has run (trim_windows) the cells that fell out of every window of
// their sequences are free again. So the local pool needs no more than
// n_seq_max * (sliding_window - 1) cells plus one batch's rows, whatever the
// sequences' lengths. A prefix copy then needs the source's cells of the
// window before the copy's end: its whole length, or a prefix of a sequence
// no longer than the window.
#pragma once

#include <algorithm>
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include <ggml-cpp.h>

#include "engine/batch.h"
#include "engine/recurrent_state.h"
#include "model/graph.h"
#include "model/model.h"
#include "util/result.h"

namespace graft {

struct KvCacheOptions {
  int n_cells = 4096;              // positions the cache holds, summed over all sequences
  int n_seq_max = 64;              // sequence ids are 0 .. n_seq_max-1 (at most kMaxSequences)
  ggml_type type = GGML_TYPE_F16;  // F16 or Q8_0
  int n_state_snapshots = 0;       // hybrid models: recurrent state snapshots held at once
  // Sliding-window models: cells of the pool of their sliding-window layers
  // (0: those layers share the n_cells of the others, and keep every position).
  int n_local_cells = 0;
};

// Bytes per token of a cache of this type (KV of the attention layers), and
// of one sequence's recurrent state (0 without linear-attention layers): for
// sizing a cache before creating it.
size_t kv_bytes_per_token(const ModelConfig& config, ggml_type type);
size_t recurrent_state_bytes(const ModelConfig& config);
// The part of kv_bytes_per_token that is the sliding-window layers' (0 for
// models without them).
size_t sliding_kv_bytes_per_token(const ModelConfig& config, ggml_type type);

// How a sliding-window model's cache splits a KV budget of n_tokens tokens'
// worth of memory (what a cache of all layers in one pool would take) between
// the global layers' cells and the local pool, for sequences of up to n_ctx
// positions, up to max_sequences of them and batches of up to max_rows rows:
// the local pool holds a window (sliding_window - 1 cells) for as many
// sequences as the local layers' share of the budget allows (at least one,
// at most max_sequences) plus one batch; what it leaves goes to global cells.
// Without a split (no sliding-window layers, or no others) global_cells is
// n_tokens and local_cells 0.
struct KvSplit {
  int64_t global_cells = 0;
  int64_t local_cells = 0;
  int max_sequences = 0;
};
KvSplit split_kv_budget(const ModelConfig& config, ggml_type type, int64_t n_tokens, int n_ctx,
                        int max_sequences, int max_rows);

class KvCache {
 public:
  static constexpr int kMaxSequences = 256;

  static Result<std::unique_ptr<KvCache>> create(const ModelConfig& config, const KvCacheOptions& options);
  // "f16" or "q8_0" as a cache type; the error names the choices.
  static Result<ggml_type> type_from_name(std::string_view name);

  // What a cache of this type costs for a model, without creating one (fit/
  // plans memory with it): bytes per cell (every layer's K and V of one
  // position) and bytes per sequence (state a family keeps per sequence
  // whatever its length, e.g. recurrent state or a sliding window's ring;
  // none for full attention). A cache of n cells and s sequences occupies
  // n * bytes_per_cell + s * bytes_per_sequence.
  struct Footprint {
    size_t bytes_per_cell = 0;
    size_t bytes_per_sequence = 0;
  };
  static Footprint footprint(const ModelConfig& config, ggml_type type);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int cells_total() const { return pool_.total(); }
  int cells_used() const { return pool_.n_used; }
  int cells_free() const { return pool_.total() - pool_.n_used; }
  // The sliding-window layers' own pool (all 0 without one).
  int local_cells_total() const { return local_.total(); }
  int local_cells_used() const { return local_.n_used; }
  int sliding_window() const { return window_; }
  // Whether n more cells can be given out now (in both pools).
  bool can_fit(int n) const {
    return n <= cells_free() && (local_.total() == 0 || n <= local_.total() - local_.n_used);
  }
  size_t bytes_total() const;           // the cells, and each sequence's recurrent state (hybrid models)
  size_t bytes_per_token() const;       // per cell, all attention layers of the main pool, K and V
  size_t local_bytes_per_cell() const;  // per cell of the local pool (0 without one)
  int n_seq_max() const { return n_seq_max_; }
  ggml_type type() const { return type_; }

  // Positions held for the sequence (the next row continues at this position).
  int seq_length(SeqId seq) const;
  // Forgets the sequence; cells no other sequence shares become free.
  void seq_free(SeqId seq);
  // Keeps positions [0, n_keep) of the sequence.
  void seq_truncate(SeqId seq, int n_keep);
  // Makes dst's first n positions those of src (sharing cells; dst must be empty).
  // With a local pool, src must still hold the cells of the window before n.
  Status seq_copy_prefix(SeqId src, SeqId dst, int n);
  // With a local pool: frees the cells that the batch's sequences (just run)
  // no longer need there. Forward calls it after each pass that succeeds.
  void trim_windows(const Batch& batch);

  // Hybrid models: the recurrent states (null otherwise).
  const RecurrentState* recurrent() const { return state_.get(); }
  // Keeps the sequence's state at its current length as a snapshot, for
  // later prefix copies and truncations to that length.
  Status seq_snapshot(SeqId seq);
  // The lengths at which the sequence has snapshots.
  std::vector<int> seq_snapshots(SeqId seq) const;
  void seq_drop_snapshots(SeqId seq);
  // Forgets everything.
  void clear();

  // Rows [row_begin, row_begin + n_rows) of a batch attend over cells
  // [cell_begin, cell_begin + n_cells): the cells of their sequences, padded
  // to 256-cell blocks, so a row never scans other sequences' cells (the
  // attention kernels pay for every cell in view, masked or not).
  struct Window {
    int row_begin = 0;
    int n_rows = 0;
    int cell_begin = 0;
    int n_cells = 0;
    bool operator==(const Window&) const = default;
  };
  // For Forward: checks the batch against the cache (sequence ids, positions
  // continuing each sequence, room), gives each row a cell and records it.
  // A sequence's rows go right after its last cell when that is free, else
  // into the next free run long enough; a new sequence starts halfway into
  // the longest free run. So sequences stay compact.
  // On error nothing changed.
  // Hybrid models: rows [row_begin, row_begin + n_seqs * n_tokens) are
  // n_seqs sequences (seqs) of n_tokens rows each (a sequence's rows must be
  // consecutive, in one run per batch).
  struct StateGroup {
    int row_begin = 0;
    int n_seqs = 0;
    int n_tokens = 0;
    std::vector<SeqId> seqs;
  };
  struct Placement {
    std::vector<int64_t> cells;            // per row
    int n_kv = 0;                          // 1 + the highest cell in use, padded: every cell any row may see
    std::vector<Window> windows;           // consecutive row groups covering the batch, in row order
    std::vector<StateGroup> state_groups;  // hybrid models: covering the batch, in row order
    // With a local pool: each row's cell there, and the windows over it.
    std::vector<int64_t> local_cells;
    std::vector<Window> local_windows;
  };
  Result<Placement> place(const Batch& batch);
  // Fills the mask [window.n_cells, window.n_rows] (F16) of one window of the
  // batch just placed: 0 where a row may look, -inf elsewhere.
  void fill_mask(const Batch& batch, const Window& window, ggml_fp16_t* mask) const;
  // The same for all rows over cells [0, n_kv).
  void fill_mask(const Batch& batch, int n_kv, ggml_fp16_t* mask) const;
  // Sliding-window layers: the mask of fill_mask less the cells of positions
  // `sliding_window` or more before each row's.
  void fill_sliding_mask(const Batch& batch, const Window& window, int sliding_window,
                         ggml_fp16_t* mask) const;
  // With a local pool: the sliding mask of one of the batch's local windows.
  void fill_local_mask(const Batch& batch, const Window& window, ggml_fp16_t* mask) const;
  // The cache tensors for the graph.
  std::vector<AttentionInputs::Layer> layer_tensors() const;

 private:
  using SeqSet = std::bitset<kMaxSequences>;
  struct Cell {
    int32_t pos = -1;
    SeqSet seqs;
    bool free() const { return seqs.none(); }
  };

  // A pool of cells: the main one (every layer, or all but the
  // sliding-window ones), and the local one of those.
  struct Pool {
    std::vector<Cell> cells;
    std::vector<int> seq_tail;  // per sequence: the cell of its last position, -1 when unknown
    int n_used = 0;
    int used_end = 0;  // 1 + the highest cell in use
    int total() const { return int(cells.size()); }
  };

  KvCache() = default;
  bool valid_seq(SeqId seq) const { return seq >= 0 && seq < n_seq_max_; }
  static void release(Pool& pool, Cell& cell, SeqId seq);
  // Keeps the sequence's cells of positions [lo, hi) in the pool; returns the tail cell (of hi - 1) or -1.
  static int keep_range(Pool& pool, SeqId seq, int lo, int hi);
  int padded_n_kv() const;
  // Windows and n_kv are padded to blocks of this many cells, as llama.cpp
  // pads n_kv: the attention kernels then see few distinct shapes, and graphs
  // can be reused across steps.
  static constexpr int kWindowPad = 256;
  // The first run of n free cells at or after `from` (wrapping around), or -1.
  static int find_free_run(const Pool& pool, int n, int from);
  // Where a new sequence's first n rows go: halfway into the longest free
  // run, so sequences placed one after another leave each other room to grow
  // and each stays one compact window. -1 when no run long enough.
  static int place_new_sequence(const Pool& pool, int n);
  // Gives each row a cell of the pool (room checked).
  void place_rows(Pool& pool, const Batch& batch, std::vector<int64_t>& cells);
  std::vector<Window> windows_for(const Pool& pool, const Batch& batch) const;
  // The mask of a window over the pool; sliding_window > 0: less what lies
  // outside each row's window.
  void fill_pool_mask(const Pool& pool, const Batch& batch, const Window& window, int sliding_window,
                      ggml_fp16_t* mask) const;
  // Hybrid models: checks the batch's runs and groups them (place's part).
  Result<std::vector<StateGroup>> state_groups_for(const Batch& batch) const;
  // Local pool: the cells a sequence of n positions holds there when whole.
  int window_cells(int n) const { return std::min(n, std::max(window_ - 1, 0)); }
  // Local pool: how many of the sequence's cells there are below position n.
  int local_cells_below(SeqId seq, int n) const;

  Pool pool_;
  Pool local_;  // sliding-window layers, when they have a pool of their own (empty otherwise)
  int window_ = 0;
  std::vector<int> seq_len_;       // per sequence: positions held
  std::vector<bool> local_valid_;  // per sequence: its local cells cover its window
  int n_seq_max_ = 0;
  ggml_type type_ = GGML_TYPE_F16;
  ggml_context_ptr ctx_;
  ggml_backend_buffer_ptr buffer_;
  std::vector<AttentionInputs::Layer> layers_;
  std::unique_ptr<RecurrentState> state_;  // hybrid models
  std::vector<bool> state_valid_;          // per sequence: its live state matches its length
};

}  // namespace graft

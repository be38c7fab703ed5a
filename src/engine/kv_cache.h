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
#pragma once

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
};

// Bytes per token of a cache of this type (KV of the attention layers), and
// of one sequence's recurrent state (0 without linear-attention layers): for
// sizing a cache before creating it.
size_t kv_bytes_per_token(const ModelConfig& config, ggml_type type);
size_t recurrent_state_bytes(const ModelConfig& config);

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

  int cells_total() const { return int(cells_.size()); }
  int cells_used() const { return n_used_; }
  int cells_free() const { return cells_total() - n_used_; }
  // Whether n more cells can be given out now.
  bool can_fit(int n) const { return n <= cells_free(); }
  size_t bytes_total() const;      // the cells, and each sequence's recurrent state (hybrid models)
  size_t bytes_per_token() const;  // per cell, all attention layers, K and V
  int n_seq_max() const { return n_seq_max_; }
  ggml_type type() const { return type_; }

  // Positions held for the sequence (the next row continues at this position).
  int seq_length(SeqId seq) const;
  // Forgets the sequence; cells no other sequence shares become free.
  void seq_free(SeqId seq);
  // Keeps positions [0, n_keep) of the sequence.
  void seq_truncate(SeqId seq, int n_keep);
  // Makes dst's first n positions those of src (sharing cells; dst must be empty).
  Status seq_copy_prefix(SeqId src, SeqId dst, int n);

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
  // The cache tensors for the graph.
  std::vector<AttentionInputs::Layer> layer_tensors() const;

 private:
  using SeqSet = std::bitset<kMaxSequences>;
  struct Cell {
    int32_t pos = -1;
    SeqSet seqs;
    bool free() const { return seqs.none(); }
  };

  KvCache() = default;
  bool valid_seq(SeqId seq) const { return seq >= 0 && seq < n_seq_max_; }
  void release(Cell& cell, SeqId seq);
  int padded_n_kv() const;
  // Windows and n_kv are padded to blocks of this many cells, as llama.cpp
  // pads n_kv: the attention kernels then see few distinct shapes, and graphs
  // can be reused across steps.
  static constexpr int kWindowPad = 256;
  // The first run of n free cells at or after `from` (wrapping around), or -1.
  int find_free_run(int n, int from) const;
  // Where a new sequence's first n rows go: halfway into the longest free
  // run, so sequences placed one after another leave each other room to grow
  // and each stays one compact window. -1 when no run is long enough.
  int place_new_sequence(int n) const;
  std::vector<Window> windows_for(const Batch& batch) const;
  // Hybrid models: checks the batch's runs and groups them (place's part).
  Result<std::vector<StateGroup>> state_groups_for(const Batch& batch) const;

  std::vector<Cell> cells_;
  std::vector<int> seq_len_;   // per sequence: positions held
  std::vector<int> seq_tail_;  // per sequence: the cell of its last position, -1 when unknown
  int n_used_ = 0;
  int used_end_ = 0;  // 1 + the highest cell in use
  int n_seq_max_ = 0;
  ggml_type type_ = GGML_TYPE_F16;
  ggml_context_ptr ctx_;
  ggml_backend_buffer_ptr buffer_;
  std::vector<AttentionInputs::Layer> layers_;
  std::unique_ptr<RecurrentState> state_;  // hybrid models
  std::vector<bool> state_valid_;          // per sequence: its live state matches its length
};

}  // namespace graft

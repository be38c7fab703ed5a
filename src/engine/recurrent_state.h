// RecurrentState: the recurrent states of a hybrid model's linear-attention
// layers (qwen35's gated delta nets), one per sequence id, plus snapshots of
// sequences' states at earlier positions.
//
// Unlike KV cells, a recurrent state cannot be cut back to an earlier
// position or shared: it is the whole past folded into one matrix. So a
// sequence that is to start from another's prefix starts from a copy of the
// other's state at exactly that prefix: its live state (the whole sequence)
// or a snapshot taken when it was that long.
//
// Memory is reserved for every slot up front but only touched when a slot is
// first used, so idle sequence ids and unused snapshot slots cost no RAM.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include <ggml-backend.h>
#include <ggml-cpp.h>
#include <ggml.h>

#include "engine/batch.h"
#include "model/graph.h"
#include "model/model.h"
#include "util/result.h"

namespace graft {

class RecurrentState {
 public:
  // One live state per sequence id 0..n_seq-1 and room for n_snapshots snapshots.
  static Result<std::unique_ptr<RecurrentState>> create(const ModelConfig& config, int n_seq,
                                                        int n_snapshots);
  ~RecurrentState();
  RecurrentState(const RecurrentState&) = delete;
  RecurrentState& operator=(const RecurrentState&) = delete;

  // Bytes of one state (every linear-attention layer's convolution and delta-rule state).
  size_t bytes_per_state() const { return bytes_per_state_; }
  int n_snapshots_max() const { return int(snapshots_.size()); }
  int n_snapshots() const;

  // Live states.
  void reset(SeqId seq);  // zero: the state before any token
  void copy(SeqId src, SeqId dst);

  // Snapshots, each owned by one sequence and taken at one position.
  // Saves seq's live state as its snapshot at pos (replacing one there).
  Status save(SeqId seq, int pos);
  bool has(SeqId seq, int pos) const;
  // dst's live state := owner's snapshot at pos (dst may be owner).
  void restore(SeqId owner, int pos, SeqId dst);
  // Drops seq's snapshots at positions above max_pos (-1: all of them).
  void drop(SeqId seq, int max_pos);
  void drop_all();
  std::vector<int> positions(SeqId seq) const;  // ascending

  // The state tensors for the graph, per model layer (nulls for attention layers).
  const std::vector<RecurrentInputs::Layer>& layer_tensors() const { return layers_; }

 private:
  struct Snapshot {
    SeqId seq = -1;  // -1: free
    int pos = -1;
  };
  RecurrentState() = default;
  void copy_slot(int from, int to);
  int find(SeqId seq, int pos) const;

  int n_seq_ = 0;
  size_t bytes_per_state_ = 0;
  std::vector<Snapshot> snapshots_;  // snapshot j lives in slot n_seq_ + j
  ggml_context_ptr ctx_;
  ggml_backend_buffer_ptr buffer_;
  std::vector<RecurrentInputs::Layer> layers_;
};

}  // namespace graft

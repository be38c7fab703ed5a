// LoraStacks: the stacked matrices of the mounted adapters of one storage
// type. Per (layer, target) that some adapter touches there is an A stack
// [n_in, max_rank, n_slots] and a B stack, transposed and blocked by outputs
// (lora_ops.h new_lora_b_stack says how and why), each adapter in one slot,
// padded with zeros to the largest rank.
//
// The stacks live in memory reserved for many slots at once (ReservedMemory:
// zero and free until written), laid out slot by slot: every stack tensor
// strides over slots, so one slot's matrices are one run of whole huge pages.
// Mounting thus faults in a dozen 2 MiB pages instead of thousands of 4 KiB
// ones, and never clears or copies what is already mounted, unless the
// stacks must be laid out anew (more slots, a larger rank, or a (layer,
// target) they lack).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <ggml-cpp.h>

#include "io/reserved_memory.h"
#include "model/lora.h"

namespace graft {

class LoraStacks {
 public:
  LoraStacks(const ModelConfig& config, ggml_type type);

  ggml_type type() const { return type_; }
  int n_slots() const { return n_slots_; }

  // A free slot, making room for an adapter with these pairs first. Sets
  // *relaid when the stack tensors were replaced. Errors: "out_of_memory".
  Result<int> make_room(const LoraWeights& weights, bool* relaid);
  // Writes the adapter's pairs into a slot make_room returned and marks it used.
  void write(int slot, const LoraWeights& weights);
  // Zeroes a slot and frees it.
  void clear(int slot);

  bool used(int slot) const { return slot >= 0 && slot < int(used_.size()) && used_[size_t(slot)]; }
  size_t slot_bytes() const { return slot_used_bytes_; }  // memory one slot's matrices occupy

  LoraSet::Stack stack(int layer, LoraTarget target) const {
    return stacks_.empty() ? LoraSet::Stack{} : stacks_[size_t(index(layer, target))];
  }

 private:
  Status lay_out(int n_slots, int max_rank, const std::vector<bool>& wanted);
  void write_pair(int slot, const LoraPair& pair);
  int index(int layer, LoraTarget target) const { return layer * kLoraTargetCount + int(target); }

  const ModelConfig& config_;
  ggml_type type_;
  int n_slots_ = 0;   // capacity of the stacks
  int max_rank_ = 0;  // padded rank of the stacks
  std::vector<bool> used_;
  std::vector<LoraSet::Stack> stacks_;  // per (layer, target)
  ggml_context_ptr ctx_;                // the stack tensors' headers
  ReservedMemory memory_;               // their data: slot s at memory_.data() + s * slot_stride_
  ggml_backend_buffer_ptr buffer_;      // a CPU buffer over memory_
  size_t slot_stride_ = 0;              // whole huge pages
  size_t slot_used_bytes_ = 0;          // of which the matrices fill this many
  std::vector<float> scratch_;          // one matrix as floats when it is not in the stacks' type
};

}  // namespace graft

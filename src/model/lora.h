// LoRA adapters mounted on a model. Every linear layer of the graph goes
// through one helper (layers.h lora_linear) that adds, for each row of the
// batch, the deltas of the adapters that row routes to:
//   delta = sum_i route.scale[i] * scale_{slot_i} * B_{slot_i} (A_{slot_i} x)
// Mounted adapters are stacked per (layer, target) into 3-D tensors (padded
// to the largest rank), so one pass (ggml_mul_mat_id for A, lora_b_add
// for B) serves a batch whose rows use no adapter, different adapters, or
// stacks of them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <ggml-backend.h>
#include <ggml.h>

#include "util/result.h"

namespace graft {

struct ModelConfig;

// The last five are the projections of qwen35's linear-attention layers.
enum class LoraTarget {
  attn_q,
  attn_k,
  attn_v,
  attn_output,
  ffn_gate,
  ffn_up,
  ffn_down,
  attn_qkv,
  attn_gate,
  ssm_alpha,
  ssm_beta,
  ssm_out,
};
constexpr int kLoraTargetCount = 12;
// "attn_q", "ffn_down", ... (the GGUF tensor name stems).
const char* lora_target_name(LoraTarget target);
// Whether the model's layer has this projection (a qwen35 layer has either
// the attention or the linear-attention ones).
bool lora_target_exists(const ModelConfig& config, int layer, LoraTarget target);

// A matrix still encoded as in its file (F32, F16, BF16 or any type ggml
// can turn into floats), row-major, in memory someone keeps alive (a file
// mapping): mounting reads it straight into the stacks, with no float copy
// of the whole adapter in between.
struct LoraSource {
  const void* data = nullptr;
  ggml_type type = GGML_TYPE_F32;
  int64_t n = 0;  // elements
};

struct LoraPair {
  int layer = 0;
  LoraTarget target = LoraTarget::attn_q;
  int rank = 0;
  std::vector<float> a;  // rank x n_in, row-major (ggml ne = [n_in, rank]; PEFT lora_A, GGUF *.lora_a)
  std::vector<float> b;  // n_out x rank, row-major (ggml ne = [rank, n_out]; PEFT lora_B, GGUF *.lora_b)
  // The same in place: used instead of a / b when their data is set.
  LoraSource a_source, b_source;

  int64_t a_size() const { return a_source.data ? a_source.n : int64_t(a.size()); }
  int64_t b_size() const { return b_source.data ? b_source.n : int64_t(b.size()); }
};

// The floats of a source (whole).
std::vector<float> to_floats(const LoraSource& source);

struct LoraWeights {
  std::vector<LoraPair> pairs;
  float scale = 1.0f;                   // alpha / rank (llama.cpp: alpha ? alpha / rank : 1)
  std::shared_ptr<const void> sources;  // keeps the pairs' sources alive
};

// The mounted adapters of one model. Not thread-safe: mount and unmount only
// while no forward runs (the engine thread serializes them).
class LoraSet {
 public:
  LoraSet() = default;
  ~LoraSet();
  LoraSet(const LoraSet&) = delete;
  LoraSet& operator=(const LoraSet&) = delete;

  void init(const ModelConfig& config, ggml_type type);

  // Checks every pair's layer, target and shapes against the model and
  // returns the slot to put in AdapterRoute::slot.
  Result<int> mount(const LoraWeights& weights);
  Status unmount(int slot);

  bool mounted(int slot) const;
  int n_mounted() const;
  float scale(int slot) const;  // the adapter's own scale (alpha / rank)
  size_t bytes() const;         // memory the mounted adapters' stacks occupy
  int n_slots() const { return n_slots_; }
  // Changes whenever the stack tensors are replaced (graphs built on the old ones are stale).
  uint64_t version() const { return version_; }

  // The stacked matrices of one (layer, target), or nulls when no mounted
  // adapter touches it. A: [n_in, max_rank, n_slots]; B, transposed:
  // [n_out, max_rank, n_slots] (see lora_ops.h).
  struct Stack {
    ggml_tensor* a = nullptr;
    ggml_tensor* b = nullptr;
  };
  Stack stack(int layer, LoraTarget target) const;

 private:
  struct Slot {
    bool used = false;
    float scale = 1.0f;
    int rank = 0;
    std::vector<bool> touches;  // per (layer, target)
  };
  Status check(const LoraWeights& weights) const;
  Status rebuild(int n_slots, int max_rank, const std::vector<bool>& wanted);
  void write_pair(int slot, const LoraPair& pair);
  // Writes rows x n values (row-major) from floats or a source into dst of the stacks' type.
  void write_rows(const std::vector<float>& values, const LoraSource& source, int64_t rows, int64_t n,
                  void* dst);
  // The same, transposed: the k-th of the n_out x rank matrix's columns to row k of dst.
  void write_columns(const std::vector<float>& values, const LoraSource& source, int64_t n_out, int rank,
                     uint8_t* dst, size_t row_bytes);
  void zero_slot(int slot);
  int index(int layer, LoraTarget target) const { return layer * kLoraTargetCount + int(target); }
  int n_in(LoraTarget target) const;
  int n_out(LoraTarget target) const;

  const ModelConfig* config_ = nullptr;
  ggml_type type_ = GGML_TYPE_F16;
  int n_slots_ = 0;   // capacity of the stacks
  int max_rank_ = 0;  // padded rank of the stacks
  std::vector<Slot> slots_;
  std::vector<Stack> stacks_;  // per (layer, target)
  ggml_context* ctx_ = nullptr;
  ggml_backend_buffer_t buffer_ = nullptr;
  uint8_t* memory_ = nullptr;   // the stacks' reserved memory: slot s at memory_ + s * slot_bytes_
  size_t slot_bytes_ = 0;       // whole huge pages
  size_t slot_used_bytes_ = 0;  // of which the matrices fill this many
  void* mapped_ = nullptr;      // what to munmap
  size_t mapped_bytes_ = 0;
  uint64_t version_ = 0;
  std::vector<float> scratch_;  // one source's floats when it is not in the stacks' type
};

}  // namespace graft

// LoRA adapters mounted on a model. Every linear layer of the graph goes
// through one helper (layers.h lora_linear) that adds, for each row of the
// batch, the deltas of the adapters that row routes to:
//   delta = sum_i route.scale[i] * scale_{slot_i} * B_{slot_i} (A_{slot_i} x)
// Each adapter is kept in a type that holds its values exactly (LoraType),
// and its products are computed as ggml computes them in that type, so an
// F16, BF16 or F32 adapter gives what llama.cpp gives with the same file.
// Mounted adapters of one type are stacked per (layer, target) into 3-D
// tensors (lora_stacks.h), so one op per projection (lora_ops.h lora_add)
// serves a batch whose rows use no adapter, different adapters, stacks of
// them, or adapters of different types.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <ggml.h>

#include "util/result.h"

namespace graft {

struct ModelConfig;
class LoraStacks;

// attn_qkv .. ssm_out are the projections of qwen35's linear-attention
// layers; per_layer_gate and per_layer_proj those of gemma4's per-layer
// inputs (each layer's gate onto its slice, and the slice back up).
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
  per_layer_gate,
  per_layer_proj,
};
constexpr int kLoraTargetCount = 14;
// "attn_q", "ffn_down", ... (the GGUF tensor name stems).
const char* lora_target_name(LoraTarget target);
// Whether the model's layer has this projection (a qwen35 layer has either
// the attention or the linear-attention ones; gemma4's shared-KV layers have
// no k or v projections, and only gemma4 has per-layer-input projections).
bool lora_target_exists(const ModelConfig& config, int layer, LoraTarget target);
// Columns (n_in) and rows (n_out) of the layer's weight that the target
// adapts (gemma4's layers differ in head and FFN widths).
int lora_n_in(const ModelConfig& config, int layer, LoraTarget target);
int lora_n_out(const ModelConfig& config, int layer, LoraTarget target);

// One matrix of a LoRA pair, row-major, in the type it was stored in (F32,
// F16, BF16, or any type ggml can turn into floats). `owner` keeps the memory
// alive: the file's mapping for an adapter read from disk (mounting copies
// straight from it, with no float copy of the whole adapter in between), or
// the matrix's own floats for one made in memory.
struct LoraMatrix {
  const void* data = nullptr;
  ggml_type type = GGML_TYPE_F32;
  int64_t n = 0;  // elements
  std::shared_ptr<const void> owner;

  // Values in memory of the matrix's own: as F32, or rounded to F16 or BF16.
  static LoraMatrix of_floats(std::vector<float> values, ggml_type type = GGML_TYPE_F32);
  // The values as floats (converted when stored otherwise).
  std::vector<float> floats() const;
};

struct LoraPair {
  int layer = 0;
  LoraTarget target = LoraTarget::attn_q;
  int rank = 0;
  LoraMatrix a;  // rank x n_in (ggml ne = [n_in, rank]; PEFT lora_A, GGUF *.lora_a)
  LoraMatrix b;  // n_out x rank (ggml ne = [rank, n_out]; PEFT lora_B, GGUF *.lora_b)
};

struct LoraWeights {
  std::vector<LoraPair> pairs;
  float scale = 1.0f;  // alpha / rank (llama.cpp: alpha ? alpha / rank : 1)
};

// How a mounted adapter is stored and computed: F16 and BF16 adapters as
// they are, every other one (F32, quantized, or mixing types) as F32.
enum class LoraType { f16, bf16, f32 };
constexpr int kLoraTypeCount = 3;
// The planes of a batch's LoRA routes (lora_ops.h): each entry's LoraType,
// its slot in the stacks of each type, and its scale.
constexpr int kLoraRoutePlanes = 2 + kLoraTypeCount;
ggml_type ggml_type_of(LoraType type);
LoraType lora_type_of(const LoraWeights& weights);

// The mounted adapters of one model. Not thread-safe: mount and unmount only
// while no forward runs (the engine thread serializes them).
class LoraSet {
 public:
  LoraSet();
  ~LoraSet();
  LoraSet(const LoraSet&) = delete;
  LoraSet& operator=(const LoraSet&) = delete;

  void init(const ModelConfig& config);

  // Checks every pair's layer, target and shapes against the model, stores
  // the adapter in its type (lora_type_of) and returns the slot to put in
  // AdapterRoute::slot. Errors: "invalid_adapter", "out_of_memory"; nothing
  // changes on error.
  Result<int> mount(const LoraWeights& weights);
  Status unmount(int slot);

  bool mounted(int slot) const;
  int n_mounted() const;
  float scale(int slot) const;  // the adapter's own scale (alpha / rank)
  size_t bytes() const;         // memory the mounted adapters' matrices occupy
  size_t bytes(int slot) const;
  // Changes whenever stack tensors are replaced (graphs built on the old ones are stale).
  uint64_t version() const { return version_; }

  // Where a mounted adapter lives: the stacks of its type, at `index`.
  struct Place {
    LoraType type = LoraType::f16;
    int index = 0;
  };
  Place place(int slot) const;

  // The stacked matrices of one (layer, target) for one type, or nulls when
  // no mounted adapter of that type touches it. A: [n_in, max_rank,
  // n_slots]; B, transposed and blocked by outputs (lora_ops.h
  // new_lora_b_stack).
  struct Stack {
    ggml_tensor* a = nullptr;
    ggml_tensor* b = nullptr;
  };
  Stack stack(int layer, LoraTarget target, LoraType type) const;

 private:
  struct Slot {
    bool used = false;
    float scale = 1.0f;
    Place place;
  };
  Status check(const LoraWeights& weights) const;

  const ModelConfig* config_ = nullptr;
  std::vector<Slot> slots_;
  std::array<std::unique_ptr<LoraStacks>, kLoraTypeCount> stacks_;
  uint64_t version_ = 0;
};

}  // namespace graft

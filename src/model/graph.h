// GraphContext: what an architecture's graph builder gets for one batch —
// the ggml context and graph to append to, the batch's input tensors, the KV
// cache tensors to store into and attend over (and the recurrent states of
// hybrid models), and the per-row LoRA routing.
// The engine (engine/forward.cpp) creates the inputs and fills them.
#pragma once

#include <array>
#include <functional>
#include <utility>
#include <vector>

#include <ggml.h>

#include "model/lora.h"

namespace graft {

// The KV cache as the graph sees it. Each layer's K and V are 2-D tensors
// [n_embd_kv, n_cells]; rows are stored into the cells `store_rows` names,
// then each group of consecutive rows attends over its own window of cells
// under its own mask.
struct AttentionInputs {
  // [n_embd_kv_of(layer), cells]; null for a layer that stores no keys or
  // values (recurrent, or reading another layer's).
  struct Layer {
    ggml_tensor* k = nullptr;
    ggml_tensor* v = nullptr;
  };
  struct Group {
    int row_begin = 0;
    int n_rows = 0;
    int cell_begin = 0;
    int n_cells = 0;
    ggml_tensor* mask = nullptr;  // F16 [n_cells, n_rows]: 0 where a row may look, -inf elsewhere
    // Models with sliding-window layers: the same, less the cells older than
    // each row's window, for those layers.
    ggml_tensor* sliding_mask = nullptr;
  };
  std::vector<Layer> layers;
  std::vector<Group> groups;          // cover the rows in order
  ggml_tensor* store_rows = nullptr;  // I64 [n_rows]: the cell each row's K/V goes to
  // When the sliding-window layers keep their cells in a pool of their own
  // (their layers' K and V have that pool's cells): where each row goes
  // there, and the groups over it, whose `mask` is the sliding one. Null and
  // empty otherwise: those layers use the above, with `sliding_mask`.
  ggml_tensor* local_store_rows = nullptr;
  std::vector<Group> local_groups;
};

// Per-row adapter routing for one batch, present only when some row of the
// batch uses an adapter.
struct LoraInputs {
  int n_used = 0;                            // the largest route (stack) size in the batch
  std::array<bool, kLoraTypeCount> types{};  // the adapter types (LoraType) some row uses
  // I32 [n_used, n_rows, kLoraRoutePlanes] (lora_ops.h): each entry's
  // LoraType, its slot among that type's stacks, and its scale (route scale
  // x adapter scale; 0 pads the route).
  ggml_tensor* routes = nullptr;
  // The same for the output rows only (after select_output_rows); null when every row is an output.
  ggml_tensor* out_routes = nullptr;  // I32 [n_used, n_outputs, kLoraRoutePlanes]
};

// Training (train/): the rows are n_seqs sequences of seq_len rows each,
// one after another, each row attending causally over its own sequence only
// (no KV cache), through ops ggml can differentiate. Every linear layer with
// a trainable pair adds scale * B (A x) in F32 through plain ggml products.
struct TrainingInputs {
  int seq_len = 0;
  int n_seqs = 0;
  ggml_tensor* causal_mask = nullptr;  // F32 [seq_len, seq_len]: 0 on and below the diagonal, -inf above
  // Models with sliding-window layers: the causal mask less what lies
  // outside each row's window, for those layers.
  ggml_tensor* sliding_mask = nullptr;
  float lora_scale = 1.0f;
  struct Pair {
    ggml_tensor* a = nullptr;  // F32 [n_in, rank]
    ggml_tensor* b = nullptr;  // F32 [rank, n_out]
  };
  std::vector<Pair> lora;  // per (layer, target): layer * kLoraTargetCount + target; nulls where none
  // When set, the input of each pair goes through it first (LoRA dropout).
  std::function<ggml_tensor*(ggml_context* ctx, ggml_tensor* x, int layer, LoraTarget target)> dropout;

  const Pair& pair(int layer, LoraTarget target) const {
    return lora[size_t(layer * kLoraTargetCount + int(target))];
  }
};

// The recurrent state of hybrid models (qwen35) as the graph sees it. Each
// linear-attention layer keeps, per state slot, a convolution state
// ([conv_kernel - 1, conv channels]) and a delta-rule state ([head_dim,
// head_dim, n_v_heads]), as rows of two F32 tensors. The rows of a batch come
// in groups: a group is n_seqs sequences of n_tokens consecutive rows each,
// reading and writing the state slots `slots` names. Each sequence appears in
// one group only.
struct RecurrentInputs {
  struct Layer {
    ggml_tensor* conv = nullptr;   // F32 [conv_state_size, n_slots]; null for attention layers
    ggml_tensor* delta = nullptr;  // F32 [delta_state_size, n_slots]
  };
  struct Group {
    int row_begin = 0;
    int n_seqs = 0;
    int n_tokens = 0;
    ggml_tensor* slots = nullptr;  // I32 [n_seqs]
  };
  std::vector<Layer> layers;
  std::vector<Group> groups;  // cover the rows in order
};

struct GraphContext {
  ggml_context* ctx = nullptr;
  ggml_cgraph* graph = nullptr;
  int n_rows = 0;
  ggml_tensor* tokens = nullptr;     // I32 [n_rows]
  ggml_tensor* positions = nullptr;  // I32 [n_rows]
  ggml_tensor* out_rows = nullptr;   // I32 [n_outputs]: rows whose logits are wanted; null = all rows
  AttentionInputs attention;
  RecurrentInputs recurrent;                 // hybrid models only
  const LoraInputs* lora = nullptr;          // null: no row uses an adapter
  const TrainingInputs* training = nullptr;  // set: a training graph (attention is unused)
  // Part of the model to build: layers [layer_begin, layer_end) (-1: to the
  // last), starting from `hidden_in` [n_embd, n_rows] instead of the token
  // embeddings when it is set, and returning the hidden states after the
  // last layer built instead of the logits when `hidden_out` is true.
  int layer_begin = 0;
  int layer_end = -1;
  ggml_tensor* hidden_in = nullptr;
  bool hidden_out = false;
  // Inputs of q4_rows and q8_rows products and their quantized form, which the
  // projections of the same input share.
  std::vector<std::pair<const ggml_tensor*, ggml_tensor*>> quantized;
  // The same for q4k_rows' Q4_K products and for its Q5_K and q6k_rows' Q6_K
  // ones (their inputs quantized otherwise: differently for Q4_K, alike for
  // Q5_K and Q6_K).
  std::vector<std::pair<const ggml_tensor*, ggml_tensor*>> quantized_k;
  std::vector<std::pair<const ggml_tensor*, ggml_tensor*>> quantized_k5;
};

}  // namespace graft

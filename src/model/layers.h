// The building blocks every architecture's graph is made of. They follow
// llama.cpp's graph op for op where it changes numbers (norm then weight,
// rope modes, flash attention over an F16 cache, fused SwiGLU), so greedy
// tokens match it on the same file.
#pragma once

#include <ggml.h>

#include "model/graph.h"
#include "model/lora.h"
#include "model/model.h"

namespace graft {

// The hidden states the graph starts from: g.hidden_in, else the token
// embeddings of g.tokens.
ggml_tensor* input_hidden(GraphContext& g, const Model& model);

// The layers to build: [g.layer_begin, g.layer_end), the whole model by default.
struct LayerRange {
  int begin = 0;
  int end = 0;
};
LayerRange layer_range(const GraphContext& g, const Model& model);

// What the graph returns after its last layer: the hidden states x when
// g.hidden_out, else the logits (output_logits).
ggml_tensor* finish_graph(GraphContext& g, const Model& model, ggml_tensor* x);

// x / rms(x) * weight (weight may be null).
ggml_tensor* rms_norm(GraphContext& g, ggml_tensor* x, ggml_tensor* weight, float eps);

// Rotary embedding of x [head_dim, n_heads, n_rows] at the batch positions.
ggml_tensor* rope(GraphContext& g, ggml_tensor* x, const RopeConfig& rope, ggml_tensor* freq_factors);

// w x for a weight no adapter targets, as every weight product of the
// graph runs (graft's own kernel where it has one for w, ggml's otherwise).
ggml_tensor* mul_mat(GraphContext& g, ggml_tensor* w, ggml_tensor* x);

// A linear layer W x (+ bias), plus the LoRA deltas of each row's adapters
// for this (layer, target) when the batch routes any row to one.
ggml_tensor* lora_linear(GraphContext& g, const Model& model, ggml_tensor* w, ggml_tensor* x, int layer,
                         LoraTarget target, ggml_tensor* bias = nullptr);

// Stores k and v [head_dim, n_head_kv, n_rows] into the layer's cache cells,
// then attends q [head_dim, n_head, n_rows] over the cache under the mask.
// In a training graph, attends each sequence's rows over that sequence's own
// k and v instead (no cache). A sliding-window layer (`sliding`) uses the
// masks that also hide what lies outside each row's window. A layer that
// shares an earlier layer's keys and values (gemma4) passes that layer, its
// k and v, and store = false: nothing is stored, and k and v only give the
// head shape (and, in training, the keys and values themselves). The cache's
// cells may be wider than k and v; they then fill the start of each cell.
// Returns [head_dim * n_head, n_rows].
ggml_tensor* attention(GraphContext& g, int layer, ggml_tensor* q, ggml_tensor* k, ggml_tensor* v,
                       float scale, bool sliding = false, bool store = true);

// silu(gate x) * (up x), then down — each through lora_linear.
ggml_tensor* swiglu_ffn(GraphContext& g, const Model& model, const LayerWeights& w, ggml_tensor* x,
                        int layer);

// gelu(gate x) * (up x) (GELU's tanh approximation), then down — each
// through lora_linear.
ggml_tensor* geglu_ffn(GraphContext& g, const Model& model, const LayerWeights& w, ggml_tensor* x, int layer);

// Keeps only the rows whose logits are wanted (the last layer's FFN and the
// output then skip the others); x itself when every row is wanted.
ggml_tensor* select_output_rows(GraphContext& g, ggml_tensor* x);

// The final norm and output projection of the rows whose logits are wanted,
// with the config's logit scale and softcap.
ggml_tensor* output_logits(GraphContext& g, const Model& model, ggml_tensor* x);

}  // namespace graft

// graft's own ggml ops for training, where ggml's op is slow or missing:
//
// - frozen_dx: the gradient of x in y = W x for a frozen weight W of any
//   type (F32, F16, BF16, quantized, or Q4_0 in ggml's repacked 8-row
//   layout): dx = W^T dy, computed as one tiled matrix product in F32 over
//   tiles of W dequantized once each. ggml's backward writes this as
//   out_prod(W, dy^T), whose CPU kernel dequantizes every row of W again for
//   every row of dy (and cannot read repacked weights); use_frozen_dx turns
//   those nodes of a backward graph into this op.
// - cross_entropy_rows: per-row cross entropy over the vocabulary against an
//   integer label, computing the loss of each row and, in place, the
//   gradient of the weighted loss sum w.r.t. the logits. ggml's own loss
//   takes dense one-hot labels as large as the logits.
// - dropout_mask: a mask of 0 and 1/(1-p) from a counter-based hash, so a
//   step's mask is the same whenever it is computed again (gradient
//   checkpointing recomputes layers) and needs no state to resume.
#pragma once

#include <cstdint>

#include <ggml.h>

namespace graft {

// w: [n_in, n_out], a frozen weight; dy_t: F32 [n_rows, n_out] (the
// transpose view of dy [n_out, n_rows], as ggml's backward passes it).
// Returns F32 [n_in, n_rows] = W^T dy. Sums run over W's rows in order, so
// the result does not depend on the thread count.
ggml_tensor* frozen_dx(ggml_context* ctx, ggml_tensor* w, ggml_tensor* dy_t);

// Whether frozen_dx reads this weight's layout (every plain layout with a
// to_float, and repacked Q4_0 on x86).
bool frozen_dx_supported(const ggml_tensor* w);

// Replaces each out_prod node of `graph` whose first source is a frozen
// weight (a leaf that is not a parameter or an input) with frozen_dx.
// Returns how many it replaced.
int use_frozen_dx(ggml_context* ctx, ggml_cgraph* graph);

// logits: F32 [n_vocab, n_rows] (contiguous), labels: I32 [n_rows],
// weights: F32 [n_rows], loss: F64 [n_rows], which must keep its memory
// after the op (the graph's output, or memory of its own). Writes
// -log softmax(logits)[label] of each row to `loss` and returns the gradient
// of sum_r weights[r] * loss[r] w.r.t. the logits:
// weights[r] * (softmax - onehot(label)).
ggml_tensor* cross_entropy_rows(ggml_context* ctx, ggml_tensor* logits, ggml_tensor* labels,
                                ggml_tensor* weights, ggml_tensor* loss);

// What a dropout mask is drawn from: `*step_key` is read when the graph
// runs (the trainer sets it per step and micro-batch), `node_key` tells the
// mask's place in the model apart, p is the drop probability.
struct DropoutKey {
  const uint64_t* step_key = nullptr;
  uint64_t node_key = 0;
  float p = 0.0f;
};

// F32 [ne0, ne1]: each element 0 with probability p, else 1 / (1 - p).
// `key` must outlive the graph.
ggml_tensor* dropout_mask(ggml_context* ctx, int64_t ne0, int64_t ne1, const DropoutKey* key);

}  // namespace graft

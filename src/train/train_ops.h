// graft's own ggml ops for training, where ggml's op is slow or missing:
//
// - frozen_dx: the gradient of x in y = W x for a frozen weight W of any
//   type (F32, F16, BF16, quantized, or Q4_0 in ggml's repacked 8-row
//   layout): dx = W^T dy, computed as one tiled matrix product in F32 over
//   tiles of W dequantized once each. ggml's backward writes this as
//   out_prod(W, dy^T), whose CPU kernel dequantizes every row of W again for
//   every row of dy (and cannot read repacked weights); use_frozen_dx turns
//   those nodes of a backward graph into this op.
// - FrozenTransposes: for quantized weights, W^T held once as Q8_0 (rows
//   along W's output dimension), so that dx = W^T dy becomes an ordinary
//   ggml_mul_mat: ggml rounds dy to Q8_0 blocks and multiplies in int8, as
//   the forward rounds x for a Q4_0 or Q8_0 weight. See docs/training.md
//   (the backward's precision).
// - cross_entropy_rows: per-row cross entropy over the vocabulary against an
//   integer label, computing the loss of each row and, in place, the
//   gradient of the weighted loss sum w.r.t. the logits. ggml's own loss
//   takes dense one-hot labels as large as the logits.
// - dropout_mask: a mask of 0 and 1/(1-p) from a counter-based hash, so a
//   step's mask is the same whenever it is computed again (gradient
//   checkpointing recomputes layers) and needs no state to resume.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include <ggml-backend.h>
#include <ggml-cpp.h>
#include <ggml.h>

namespace graft {

// Transposed Q8_0 copies of frozen quantized weights: for W [n_in, n_out],
// W^T [n_out, n_in] in Q8_0 (each block 32 of W's output rows, one input
// column). The copy rounds W's values a second time, to 8 bits per block of
// 32 output rows; the product rounds dy to Q8_0 as the forward rounds x.
class FrozenTransposes {
 public:
  // Makes the copy of every weight in `weights` that is quantized (not F32,
  // F16 or BF16), frozen_dx_supported and has a multiple of 32 rows; the
  // others stay on frozen_dx's F32 product. Uses n_threads threads.
  void build(const std::vector<const ggml_tensor*>& weights, int n_threads);
  // W^T for w, or nullptr.
  ggml_tensor* find(const ggml_tensor* w) const;
  size_t bytes() const;
  size_t count() const { return map_.size(); }

 private:
  ggml_context_ptr ctx_;
  ggml_backend_buffer_ptr buffer_;
  std::unordered_map<const ggml_tensor*, ggml_tensor*> map_;
};

// w: [n_in, n_out], a frozen weight; dy_t: F32 [n_rows, n_out] (the
// transpose view of dy [n_out, n_rows], as ggml's backward passes it).
// Returns F32 [n_in, n_rows] = W^T dy. Sums run over W's rows in order, so
// the result does not depend on the thread count.
// With `transposes` holding w's copy (and dy_t the transpose view of a
// tensor with contiguous rows), the product is ggml_mul_mat(W^T, dy) in
// int8 instead (see FrozenTransposes).
ggml_tensor* frozen_dx(ggml_context* ctx, ggml_tensor* w, ggml_tensor* dy_t,
                       const FrozenTransposes* transposes = nullptr);

// Whether frozen_dx reads this weight's layout (every plain layout with a
// to_float, and repacked Q4_0 on x86).
bool frozen_dx_supported(const ggml_tensor* w);

// Makes `node` compute what `op` computes (its op, parameters and sources),
// so that its consumers and the graph's gradient table, which point at the
// node, take the replacement.
void replace_node_op(ggml_tensor* node, const ggml_tensor* op);

// Replaces each out_prod node of `graph` whose first source is a frozen
// weight (a leaf that is not a parameter or an input) with frozen_dx (the
// int8 product where `transposes` holds the weight's copy). Returns how many
// it replaced.
int use_frozen_dx(ggml_context* ctx, ggml_cgraph* graph, const FrozenTransposes* transposes = nullptr);

// ggml_out_prod(a, b) for F32 a (rows contiguous) and b (any strides), as a
// register-blocked product (out_prod.cpp): dst[i, j] = sum_k a[i, k] b[j, k],
// a broadcast over b's batches as ggml broadcasts it. Sums run over k in
// order, so the result does not depend on the thread count.
bool out_prod_f32_supported(const ggml_tensor* a, const ggml_tensor* b);
ggml_tensor* out_prod_f32(ggml_context* ctx, ggml_tensor* a, ggml_tensor* b);

// Replaces each product of a frozen Q4_0 weight that q4_rows reads
// (model/q4_rows.h: its result is ggml's to the bit) with q4_rows. The
// model's code builds training graphs with ggml's products, whose backward ggml knows; run this
// once the backward is built (each product quantizes its input itself:
// q4_rows_mul_mat_f32). Returns how many it replaced.
int use_q4_rows(ggml_context* ctx, ggml_cgraph* graph);

// Replaces each remaining F32 out_prod node of `graph` (the LoRA and
// attention gradients ggml's backward writes) with out_prod_f32. Returns how
// many it replaced. Run after use_frozen_dx.
int use_out_prod_f32(ggml_context* ctx, ggml_cgraph* graph);

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

// The gated delta rule of qwen35's linear-attention layers as one op that
// reads and writes each sequence's state where it lives, in its slot of the
// recurrent state tensor.
//
// ggml_gated_delta_net takes the states as an input and returns the new ones
// beside its outputs, so a graph around it gathers the slots' states
// (get_rows), the op copies them into its result, and set_rows copies them
// back: three copies of 2 MiB per layer and sequence on the bench model
// (32 heads of 128 x 128), on top of the op's own four passes over each
// head's state per token (decay, read at k, write, read at q). This op does
// one pass per token over each state row where it lies, two in L1 (decay and
// read at k, then write and read at q), and copies nothing.
//
// The numbers are ggml's to the bit: per state row the same operations in
// the same order as ggml-cpu's gated_delta_net (multiply by exp(g), a dot
// product with k summed as ggml_vec_dot_f32 sums it on this CPU, the fused
// multiply-add of the write, the dot product with q, then the scale), so
// greedy outputs and goldens stay as with ggml's op.
// tests/model/delta_net_test.cpp checks it against ggml_gated_delta_net.
#pragma once

#include <cstdint>

#include <ggml.h>

namespace graft {

// Whether this build runs delta_net_update for heads of head_dim: compiled
// for AVX2 with FMA or for AVX-512, and head_dim whole vectors. Elsewhere
// graphs use ggml_gated_delta_net.
bool delta_net_update_supported(int64_t head_dim);

// q, k: F32 [head_dim, n_k_heads, n_tokens, n_seqs]; v: F32 [head_dim,
// n_v_heads, n_tokens, n_seqs] (each row contiguous; value head h reads key
// head h % n_k_heads, as ggml's op does); g (the decay's log) and beta: F32
// [1, n_v_heads, n_tokens, n_seqs], contiguous; states: F32 [head_dim *
// head_dim * n_v_heads, n_slots], each head's state stored transposed as
// ggml's op stores it; slots: I32 [n_seqs], the state row of each sequence
// (distinct). Returns F32 [head_dim, n_v_heads, n_tokens, n_seqs], the
// outputs; when the graph runs, the slots' states advance by the n_tokens
// tokens in place.
ggml_tensor* delta_net_update(ggml_context* ctx, ggml_tensor* q, ggml_tensor* k, ggml_tensor* v,
                              ggml_tensor* g, ggml_tensor* beta, ggml_tensor* states, ggml_tensor* slots);

// The short causal convolution of qwen35's linear-attention layers as one op
// that reads each sequence's conv state where it lives and advances it in
// place. In ggml ops it takes five nodes (gather the states, join them to the
// inputs transposed, convolve, copy out the last inputs, scatter them back),
// with a transposed copy of the whole input between them and a convolution
// that walks it a row of one channel at a time; this reads the inputs as the
// projection left them, eight channels a vector.
//
// The numbers are ggml_ssm_conv's to the bit: per channel and token the sum
// from 0 of input x weight over the taps, oldest first, rounded as below
// (tests/model/delta_net_test.cpp checks it against the ops).
//
// Only for convolutions of 4 taps (Qwen3.5's), summed as this build of ggml
// sums them: its C loop is compiled to round each product before the add
// (GCC, AVX2) or to fuse them (GCC, AVX-512); conv_update asks ggml's op once
// which, and is not used when it is neither.
bool conv_update_supported(int64_t taps);

// x: F32 [channels, n_tokens, n_seqs], rows contiguous (a view of the
// projection's rows); states: F32 [(taps - 1) * channels, n_slots], each
// channel's last taps - 1 inputs, oldest first; weights: F32 [taps,
// channels]; slots: I32 [n_seqs], distinct. Returns F32 [channels,
// n_tokens, n_seqs], the convolution (before its activation); when the graph
// runs, the slots' states take the last taps - 1 inputs in place.
ggml_tensor* conv_update(ggml_context* ctx, ggml_tensor* x, ggml_tensor* states, ggml_tensor* weights,
                         ggml_tensor* slots);

}  // namespace graft

// LoRA as one ggml op: for every row, y plus, for each adapter the row routes
// to in turn, scale * B_slot (A_slot x). Both products run in one pass, and
// the threads share the work by whole rows where the rows allow, so each
// adapter is read once per step, by one thread, with no step between its A
// and B products (A through ggml_mul_mat_id and then an op for B, the A side
// and the extra op cost about as much as the B side: with 8 rank-16 adapters
// on the 1B test model, Q4_0, 8 rows, 0.74 -> 0.78-0.8x of the base rate;
// with the B side's prefetch, 0.83-0.93x).
// B is stacked transposed, so its product is rank long axpys over n_out
// instead of n_out dot products of length rank, which ggml's matmul kernels
// run slowly; and the scaling and adding are done in the same pass, not as
// two more ops per projection. Its slots are blocked by outputs
// (lora_b_index): each block holds kLoraBBlock outputs of every rank index in
// turn, so a term reads its slot as one run from start to end. Stored as
// plain transposed rows (rank runs of n_out, read side by side), the B side
// read memory at about half the rate of the A side: with 8 rank-16 adapters
// (Q4_0 1B, 8 rows) 0.85x -> 0.88x of the base rate.
//
// The numbers are ggml's. A x is what ggml_mul_mat_id gives: x turned into
// the dot product's input type for A's type, then ggml's own dot product per
// row of A. Each term is the one ggml_mul_mat (one row at a time, as in
// decoding), ggml_scale and ggml_add give for an adapter of that type, the
// length of its dot products the adapter's own rank (a stack pads it):
// - F16 and BF16 below ggml's SIMD step for dot products (64 elements with
//   AVX-512, 32 with AVX2; found by asking ggml), where ggml sums a dot
//   product in order: A x rounded to the adapter's type, each product exact
//   in float, summed in double, vectorized over outputs here;
// - F32 below ggml's SIMD step (64 with AVX-512, 32 with AVX2): products
//   rounded to float and summed in float, in order, the last rank % W of
//   them fused, as GCC compiles ggml's scalar loop (a W-wide vector body
//   whose in-order sum keeps each product's rounding, then a contracted
//   scalar tail); W (4 with AVX2, 8 with AVX-512) and the step are found
//   once by asking ggml's own dot product;
// - F16 and F32 from there on AVX-512: ggml's vector order (four 16-wide
//   accumulators, its reduction tree, then the tail as above: in double for
//   F16, by the W rule for F32), vectorized over outputs, one register per
//   lane of the 64-wide step;
// - the rest (BF16 past its step, any kernel that does not match the ggml
//   it links): through ggml's own dot product on gathered columns of B
//   (slower: with 8 rank-16 F32 adapters this way, decoding ran at half the
//   F16 speed).
// Before the probed steps and the vector order, every F16 and F32 rank from
// 32 went the slow way: 8 rank-32 F16 adapters decoded at 0.19x the base
// rate, 8 rank-64 ones at 0.11x; now 0.70x and 0.42x (graft bench, Q4_0 1B,
// 8 rows, steps interleaved).
// tests/model/lora_ops_test.cpp checks each against ggml.
#pragma once

#include <span>

#include <ggml.h>

#include "model/lora.h"

namespace graft {

// B's stacks: [kLoraBBlock * rank, lora_b_blocks(n_out), n_slots]. Within
// a slot, element (k, o) of the transposed B (B's column k, output o) is at
// lora_b_index(rank, k, o); outputs past n_out in the last block are zero.
inline constexpr int64_t kLoraBBlock = 128;
inline int64_t lora_b_blocks(int64_t n_out) {
  return (n_out + kLoraBBlock - 1) / kLoraBBlock;
}
inline int64_t lora_b_index(int64_t rank, int64_t k, int64_t o) {
  return (o / kLoraBBlock * rank + k) * kLoraBBlock + o % kLoraBBlock;
}
ggml_tensor* new_lora_b_stack(ggml_context* ctx, ggml_type type, int64_t n_out, int64_t rank,
                              int64_t n_slots);

// y: F32 [n_out, n_rows]; x: F32 [n_in, n_rows], the projection's input;
// routes: I32 [n_used, n_rows, kLoraRoutePlanes]: plane 0 the LoraType of
// each entry's adapter, plane 1 + t its slot in type t's stacks, the last
// plane its scale, an F32 in the I32's bits (0: no adapter there; one
// tensor, as a ggml custom op takes at most 9 sources); groups: the stacks (LoraSet::
// Stack, A [n_in, rank_t, n_slots_t] and B as new_lora_b_stack makes it) of at
// most one (layer, target) per type. Returns F32 [n_out, n_rows]: y + scale_u * B_u ax_u
// added for u = 0, 1, ... in turn, each term rounded to float first, exactly
// as ggml_mul then ggml_add per term would round. An entry whose type has no
// group adds nothing (its adapter does not touch this projection).
ggml_tensor* lora_add(ggml_context* ctx, ggml_tensor* y, ggml_tensor* x, ggml_tensor* routes,
                      std::span<const LoraSet::Stack> groups);

// Which of lora_add's B-side kernels this binary found to round as the ggml
// it links (each is checked once against ggml's own dot products; where one
// differs, ggml's dot product is used instead).
struct LoraKernels {
  bool avx512 = false;              // lora_ops built for AVX-512 (GRAFT_NATIVE on such a CPU)
  int64_t f16_in_order_below = 0;   // F16 ranks below this: summed in order, in double
  int64_t bf16_in_order_below = 0;  // the same for BF16
  bool f16_simd_order = false;      // F16 ranks from there: ggml's AVX-512 order, 16 outputs at a time
  int64_t f32_tail_width = 0;       // F32: in float, the last rank % width fused ...
  int64_t f32_in_order_below = 0;   // ... for ranks below this
  bool f32_simd_order = false;      // F32 ranks from there: ggml's AVX-512 order
};
LoraKernels lora_kernels();

}  // namespace graft

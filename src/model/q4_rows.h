// Matrix products over Q4_0 weights that ggml's CPU backend has repacked
// into its 8-column interleaved layout, for any number of rows. ggml's
// kernels for that layout take the rows sixteen at a time (four at a time
// below sixteen, one at a time below four), unpacking every weight block
// again for each group of rows and spending four instructions on each VNNI
// multiply to make it signed. These take the rows sixteen at a time, unpack
// each block once for all of them, multiply the unsigned nibbles directly,
// the -8 offset folded into each accumulator's start, and convert, scale
// and add two rows' block sums per instruction. On the 1B Q4_0 bench model
// (AVX-512 VNNI, 2 threads): prompts ~1.3x ggml's rate, one-row decode
// ~1.2-1.4x, 2-8 rows 1.3-2x; 16-row decode's products ~15% faster than
// two passes of eight rows.
//
// The result is ggml's to the bit: the inputs are quantized to 8-bit blocks
// as ggml quantizes them, the integer block sums are exact, and each block is
// scaled and added with one fused multiply-add, in block order, as ggml does.
//
// It reads ggml's repacked Q4_0 layout, which ggml does not publish (see
// model/cpu_repack.h, where that knowledge lives and is checked against
// ggml's own repacking at load). Decision: keep it. It is graft's prompt and
// batched-decode speed on AVX-512 VNNI CPUs (figures above), and the price,
// a dependency on an unpublished layout of one ggml version, is bounded:
// when another ggml lays Q4_0 out otherwise, is_q4x8 is false and every
// product goes to ggml's own kernels, slower but right.
#pragma once

#include <ggml.h>

namespace graft {

// Whether this CPU runs q4_rows: AVX-512 (F, BW) with VNNI.
bool q4_rows_cpu();

// Whether q4_rows multiplies by w: a Q4_0 weight ggml holds repacked in the
// layout q4_rows reads (is_q4x8), on a CPU that runs q4_rows.
bool q4_rows_supported(const ggml_tensor* w);

// x: F32 [n_in, n_rows], n_in a multiple of 32. The rows quantized once for
// every q4_rows_mul_mat (and q8_rows_mul_mat, model/q8_rows.h) that reads
// them.
ggml_tensor* q4_rows_quantize(ggml_context* ctx, ggml_tensor* x);

// w: [n_in, n_out] with q4_rows_supported(w); xq: q4_rows_quantize of
// [n_in, n_rows]. Returns F32 [n_out, n_rows] = w x.
ggml_tensor* q4_rows_mul_mat(ggml_context* ctx, ggml_tensor* w, ggml_tensor* xq);

// The same product as one node, x F32 [n_in, n_rows] (rows contiguous):
// each thread quantizes all of x itself (for graphs whose order is already
// built, as the trainer's are once ggml adds the backward).
ggml_tensor* q4_rows_mul_mat_f32(ggml_context* ctx, ggml_tensor* w, ggml_tensor* x);

}  // namespace graft

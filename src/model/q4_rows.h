// Matrix products of a few rows (decode steps, short prompts) over Q4_0
// weights that ggml's CPU backend has repacked into its 8-column interleaved
// layout. ggml's kernels for that layout take the rows four at a time below
// sixteen, unpacking every weight block again for each group of four, and
// one row at a time below four, reading all the weights once per row. These
// take up to eight rows per pass over the weights, unpack each block once for
// all of them, and multiply with AVX-512 VNNI.
//
// The result is ggml's to the bit: the inputs are quantized to 8-bit blocks
// as ggml quantizes them, the integer block sums are exact, and each block is
// scaled and added with one fused multiply-add, in block order, as ggml does.
#pragma once

#include <ggml.h>

namespace graft {

// True when w is a Q4_0 weight in ggml's repacked 8-column layout and this
// CPU has AVX-512 (F, BW) with VNNI.
bool q4_rows_supported(const ggml_tensor* w);

// x: F32 [n_in, n_rows], n_in a multiple of 32. The rows quantized once for
// every q4_rows_mul_mat that reads them.
ggml_tensor* q4_rows_quantize(ggml_context* ctx, ggml_tensor* x);

// w: [n_in, n_out] with q4_rows_supported(w); xq: q4_rows_quantize of
// [n_in, n_rows]. Returns F32 [n_out, n_rows] = w x.
ggml_tensor* q4_rows_mul_mat(ggml_context* ctx, ggml_tensor* w, ggml_tensor* xq);

}  // namespace graft

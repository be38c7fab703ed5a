// Matrix products of a few rows (a decode step of 2-15 sequences) over Q4_0
// weights that ggml's CPU backend has repacked into its 8-column interleaved
// layout. ggml's kernels for that layout take the rows four at a time (or
// sixteen), unpacking every weight block again for each group of four, and
// below four rows they run one row at a time, reading all the weights once
// per row. These take up to eight rows per pass over the weights, unpack each
// block once for all of them, and multiply with AVX-512 VNNI.
//
// The inputs are quantized to 8-bit blocks of 32 as ggml quantizes them
// (scale max|x| / 127 kept as F16, values rounded to nearest even), so the
// integer products are the ones ggml computes; only the order of the float
// sums differs (a few ulps).
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

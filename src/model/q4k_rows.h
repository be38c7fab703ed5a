// Matrix products over Q4_K weights that ggml's CPU backend has repacked
// into its 8-column interleaved layout (Q4Kx8, model/cpu_repack.h), in
// q4_rows' manner (model/q4_rows.h): up to sixteen rows per pass over the
// weights, each block's nibbles, scales and mins unpacked once for all of
// them, AVX-512 VNNI dot products, rows in groups of four scaled and added
// two rows per instruction, many-row products in chunks of rows whose
// quantized inputs stay in L2.
//
// The result is ggml's to the bit. The inputs are quantized to 8-bit blocks
// of 256 as ggml quantizes them for Q4_K, and the integer sums are exact; but
// ggml scales and adds them in two orders: rows in groups of four (the first
// n_rows - n_rows % 4) once per 64 inputs, the other rows once per 256 (its
// kernels for four rows and for one). The two differ in the last bits, so a
// row's result through ggml depends on how many rows share its product, and
// q4k_rows follows the same split to match it. (For Q4_0 ggml's paths agree;
// q4_rows' rows do not depend on their neighbours.)
#pragma once

#include <ggml.h>

namespace graft {

// Whether q4k_rows multiplies by w: a Q4_K weight ggml holds repacked in the
// layout q4k_rows reads (is_q4kx8), on a CPU that runs q4_rows.
bool q4k_rows_supported(const ggml_tensor* w);

// x: F32 [n_in, n_rows], n_in a multiple of 256. The rows quantized once for
// every q4k_rows_mul_mat that reads them.
ggml_tensor* q4k_rows_quantize(ggml_context* ctx, ggml_tensor* x);

// w: [n_in, n_out] with q4k_rows_supported(w); xq: q4k_rows_quantize of
// [n_in, n_rows]. Returns F32 [n_out, n_rows] = w x.
ggml_tensor* q4k_rows_mul_mat(ggml_context* ctx, ggml_tensor* w, ggml_tensor* xq);

// Q5_K weights, which ggml does not repack (on x86), read as files store
// them, as q6k_rows reads Q6_K (model/q6k_rows.h): a weight row at a time,
// front to back as ggml reads it, each block's 5-bit weights and scales
// unpacked in registers once for up to 8 rows, 64 inputs per VNNI multiply.
// ggml multiplies Q5_K one row and one weight row at a time, so here every
// row takes the same order and its result does not depend on its
// neighbours; again ggml's to the bit. Against ggml's kernel in graft bench
// (Q5_K_M 1B, 2 threads, Zen 5): 1.45x its decode rate at 1 row, 2x at 2.
// Whether q5k_rows multiplies by w: a Q5_K weight (n_in a multiple of 256)
// in host memory as files store it, on a CPU that runs q4_rows.
bool q5k_rows_supported(const ggml_tensor* w);

// As q4k_rows_quantize, for q5k_rows_mul_mat (ggml quantizes the rows of a
// Q5_K product alike only where the largest magnitude has one sign).
ggml_tensor* q5k_rows_quantize(ggml_context* ctx, ggml_tensor* x);

// w: [n_in, n_out] with q5k_rows_supported(w); xq: q5k_rows_quantize of [n_in, n_rows]. Returns F32
// [n_out, n_rows] = w x.
ggml_tensor* q5k_rows_mul_mat(ggml_context* ctx, ggml_tensor* w, ggml_tensor* xq);

}  // namespace graft

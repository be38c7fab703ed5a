// Matrix products over Q8_0 weights (as files store them: ggml does not
// repack Q8_0 on x86), for any number of rows, on CPUs with AVX-512 VNNI.
// ggml multiplies each row with each weight row separately, or in tiles of
// at most 4 x 4, with 256-bit vectors and four instructions per multiply to
// make it signed. These take 4 rows by 8 weight rows per pass,
// two weight rows per 512-bit vector, load each weight block once for all
// the rows of the pass, and multiply signed inputs by weights made unsigned
// (weight + 128), the offset's share folded into each accumulator's start.
// One row (decode) goes weight row by weight row, each read front to back as
// ggml reads them (several weight rows at once read memory slower here).
//
// The result is ggml's to the bit: the inputs are the 8-bit blocks of
// model/rows_input.h (quantized as ggml quantizes them), and, as ggml does,
// each block gives 8 exact integer sums of 4 products, each scaled by the
// two blocks' F16 scales multiplied in F32 and added into its own lane by one
// fused multiply-add, in block order; the 8 lanes are summed at the end as
// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).
#pragma once

#include <ggml.h>

namespace graft {

// Whether q8_rows multiplies by w: a Q8_0 weight in host memory laid out as
// Q8_0 rows (not in ggml's repack buffer), on a CPU that runs q4_rows
// (q4_rows_cpu: AVX-512 VNNI).
bool q8_rows_supported(const ggml_tensor* w);

// w: [n_in, n_out] with q8_rows_supported(w); xq: q4_rows_quantize of
// [n_in, n_rows] (model/q4_rows.h). Returns F32 [n_out, n_rows] = w x.
ggml_tensor* q8_rows_mul_mat(ggml_context* ctx, ggml_tensor* w, ggml_tensor* xq);

}  // namespace graft

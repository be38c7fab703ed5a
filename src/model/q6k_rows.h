// Matrix products over Q6_K weights as files store them (ggml does not
// repack Q6_K on x86), on CPUs with AVX-512 VNNI. Q6_K is the output matrix
// and ffn_down / attn_v of Q4_K_M and Q5_K_M files. Up to 8 rows (decode):
// one weight row at a time, read front to back as ggml reads it, each
// block's 6-bit weights and scales unpacked in registers once for all the
// rows, 64 inputs per VNNI multiply (ggml: 32, and 3 instructions each). More
// rows: in q4k_rows' manner (model/q4k_rows.h), 8 weight rows per
// group, each block of the group unpacked once for 8 rows at a time, in
// chunks of rows whose quantized inputs stay in L2. Against ggml's kernel,
// inside one process on 2 threads (Zen 5): 1.4-1.8x its rate for 1 row,
// 2-3.8x for 2-8 rows, 2.5-2.9x for 16 and 512.
//
// The result is ggml's to the bit. ggml multiplies Q6_K one row and one
// weight row at a time (ggml_vec_dot_q6_K_q8_K, its AVX2 code on AVX-512
// CPUs), on inputs quantized as q5k_rows_quantize quantizes them: per
// block of 256, 8 lanes of exact integer sums (lane m: the scaled products
// of inputs 4m .. 4m + 3 of every 32, less 32 times the scaled input sums
// of inputs 32m .. 32m + 31), each lane scaled by the weight block's F16
// scale times the input block's F32 one and added by one fused
// multiply-add, block by block; the lanes
// added as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) at the end.
// q6k_rows computes the same lanes and adds them in the same order, so a
// row's result does not depend on its neighbours either.
#pragma once

#include <ggml.h>

namespace graft {

// Whether q6k_rows multiplies by w: a Q6_K weight (n_in a multiple of 256,
// any n_out) in host memory as files store it, on a CPU that runs q4_rows
// (AVX-512 VNNI). (Any number of rows: it is faster than ggml's kernel for
// each.)
bool q6k_rows_supported(const ggml_tensor* w);

// w: [n_in, n_out] with q6k_rows_supported(w); xq: q5k_rows_quantize of [n_in, n_rows]
// (model/q4k_rows.h: Q5_K's and Q6_K's inputs are quantized alike, so one
// quantized input serves both). Returns F32 [n_out, n_rows] = w x.
ggml_tensor* q6k_rows_mul_mat(ggml_context* ctx, ggml_tensor* w, ggml_tensor* xq);

}  // namespace graft

// Matrix products over Q4_0 weights that ggml's CPU backend has repacked
// into its 8-column interleaved layout, for any number of rows. ggml's
// kernels for that layout take the rows sixteen at a time (four at a time
// below sixteen, one at a time below four), unpacking every weight block
// again for each group of rows and spending four instructions on each VNNI
// multiply to make it signed. These take the rows eight at a time, unpack
// each block once for all of them, and multiply the unsigned nibbles
// directly, the -8 offset folded into each accumulator's start. On the 1B
// Q4_0 bench model (AVX-512 VNNI, 2 threads): prompts ~1.3x ggml's rate,
// one-row decode ~1.2-1.4x, 2-8 rows 1.3-2x.
//
// The result is ggml's to the bit: the inputs are quantized to 8-bit blocks
// as ggml quantizes them, the integer block sums are exact, and each block is
// scaled and added with one fused multiply-add, in block order, as ggml does.
//
// What this relies on that ggml does not publish, all of it in q4_rows.cpp:
// the byte layout of a Q4_0 weight in the CPU backend's "CPU_REPACK" buffer
// (ggml-cpu/repack.cpp: block_q4_0x8, 8-byte interleave, nibbles xor 8),
// which ggml picks for Q4_0 wherever it has AVX2. It is tied to the ggml
// this tree builds, ggml 0.23.0 (llama.cpp 80fb11a, kQ4RowsGgmlVersion).
// Decision: keep it. It is graft's prompt and batched-decode speed on
// AVX-512 VNNI CPUs, and the price, a dependency on an unpublished layout,
// is paid once: the model loader checks every repacked Q4_0 weight against
// its file bytes (q4_rows_layout_matches) and a weight whose layout differs
// (another ggml) is multiplied by ggml's own kernels instead of giving wrong
// numbers. Nothing else of ggml's internals (buffer names, `extra`) is read.
#pragma once

#include <ggml.h>

namespace graft {

inline constexpr const char* kQ4RowsGgmlVersion = "0.23.0";

// Whether this CPU runs q4_rows: AVX-512 (F, BW) with VNNI.
bool q4_rows_cpu();

// Whether `packed`, a Q4_0 weight [n_in, n_out] that ggml's CPU_REPACK
// buffer holds, is laid out as q4_rows reads it, judged against `original`,
// the same weight's Q4_0 rows as the file stores them (its first and last
// groups of 8 rows are compared byte for byte).
bool q4_rows_layout_matches(const ggml_tensor* packed, const void* original);

// x: F32 [n_in, n_rows], n_in a multiple of 32. The rows quantized once for
// every q4_rows_mul_mat that reads them.
ggml_tensor* q4_rows_quantize(ggml_context* ctx, ggml_tensor* x);

// w: [n_in, n_out], a weight whose layout q4_rows_layout_matches confirmed
// (Model::multiplies_by_q4_rows); xq: q4_rows_quantize of [n_in, n_rows].
// Returns F32 [n_out, n_rows] = w x.
ggml_tensor* q4_rows_mul_mat(ggml_context* ctx, ggml_tensor* w, ggml_tensor* xq);

}  // namespace graft

// Attention over graft's KV cache (F16 or Q8_0) on CPUs with AVX-512 VNNI,
// where ggml's flash attention takes each cell through calls that convert
// and store: the query's product with each cell's key through its vec_dot,
// then (Q8_0) the cell's values dequantized into a buffer and added from
// there. Here each (row, head) runs its cells in registers: the key product
// as ggml's, the values converted and added in the same fused multiply-add.
//
// The result is ggml's to the bit, as ggml computes it for the same rows
// (one query row and head at a time, cells in order, online softmax):
// - the query quantized (Q8_0) or rounded (F16) as ggml converts it for the
//   key product;
// - per cell, the key product as ggml_vec_dot_q8_0_q8_0 sums it (8 lanes of
//   exact integer sums, one fused multiply-add per block, the lanes added
//   ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))) or ggml_vec_dot_f16
//   (4 accumulators of 16 lanes, added 0 + 2, 1 + 3, together, across);
//   scaled, masked, and the running maximum, sum and values updated in
//   ggml's order and roundings, with the same expf; F16 values accumulate
//   in F16, as ggml's do;
// - one row over 512 cells or more of an F16 cache: cut into as many chunks
//   of cells as the graph has threads and joined as ggml joins them.
// F16 caches for fewer than 64 rows only: from 64 rows ggml tiles them.
#pragma once

#include <ggml.h>

namespace graft {

// Whether kv_attention takes n_rows rows over keys k and values v: both F16
// or both Q8_0 views of a cache ([head_dim, n_head_kv, n_cells], rows of
// whole blocks), head_dim 64, 128 or 256, on a CPU that runs q4_rows; an F16
// cache for fewer than 64 rows.
bool kv_attention_supported(const ggml_tensor* k, const ggml_tensor* v, int64_t n_rows);

// q: F32 [head_dim, n_head, n_rows] (heads and rows may be strided); k, v
// as kv_attention_supported takes them, n_head a multiple of n_head_kv;
// mask: F16 [n_cells, >= n_rows], 0 where a row may look and -inf
// elsewhere. Returns F32 [head_dim, n_head, n_rows]: what
// ggml_flash_attn_ext(q, k, v, mask, scale, 0, 0) (q, k, v permuted to
// heads outermost, F32 precision) returns, to the bit.
ggml_tensor* kv_attention(ggml_context* ctx, ggml_tensor* q, ggml_tensor* k, ggml_tensor* v,
                          ggml_tensor* mask, float scale);

}  // namespace graft

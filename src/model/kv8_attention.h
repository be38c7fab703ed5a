// Attention over a Q8_0 KV cache (--kv-type q8_0) on CPUs with AVX-512
// VNNI. ggml's flash attention takes each cell's key product through its
// Q8_0 dot product, then dequantizes the cell's values into a buffer and
// adds them from there, two calls and a store and a load per cell and head.
// Here each (row, head) runs its cells in registers: the key product as
// ggml's, the values dequantized and added in the same fused multiply-add.
//
// The result is ggml's to the bit, as ggml computes a Q8_0 cache's
// attention at any number of rows (one query row and head at a time, cells
// in order, online softmax): the query quantized as ggml quantizes it for a
// Q8_0 product; per cell, the key product as ggml_vec_dot_q8_0_q8_0 sums
// it (8 lanes of exact integer sums, one fused multiply-add per block,
// lanes added ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))), scaled,
// masked, and the running maximum, sum and value accumulators updated in
// ggml's order and roundings, with the same expf.
#pragma once

#include <ggml.h>

namespace graft {

// Whether kv8_attention takes keys k and values v: both Q8_0 views of a
// cache ([head_dim, n_head_kv, n_cells], rows of whole blocks), head_dim 64,
// 128 or 256, on a CPU that runs q4_rows.
bool kv8_attention_supported(const ggml_tensor* k, const ggml_tensor* v);

// q: F32 [head_dim, n_head, n_rows] (heads and rows may be strided); k, v
// as kv8_attention_supported takes them, n_head a multiple of n_head_kv;
// mask: F16 [n_cells, >= n_rows], 0 where a row may look and -inf
// elsewhere. Returns F32 [head_dim, n_head, n_rows]: what
// ggml_flash_attn_ext(q, k, v, mask, scale, 0, 0) (q, k, v permuted to
// heads outermost) returns, to the bit.
ggml_tensor* kv8_attention(ggml_context* ctx, ggml_tensor* q, ggml_tensor* k, ggml_tensor* v,
                           ggml_tensor* mask, float scale);

}  // namespace graft

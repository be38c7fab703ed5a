// The int8 product dx = W^T dy on CPUs with AVX-512 VNNI, for frozen_dx
// (train_ops.h): W^T held once in a layout of graft's own (Q8x16 below),
// dy quantized to 8-bit blocks per step. ggml's product over a Q8_0 copy
// (its fallback elsewhere) multiplies 4 x 4 tiles of 256-bit registers and
// re-reads dy for every 4 rows of W^T; here 16 rows of W^T share each
// 512-bit multiply and 8 rows of dy share each weight load, with the K
// dimension cut into chunks that stay in cache.
//
// The values are those of the Q8_0 path: W^T's blocks are Q8_0's (same
// rounding, same F16 scales) and dy is rounded as ggml rounds an activation
// for a Q8_0 weight, so only the order of the float sums differs.
#pragma once

#include <cstdint>

#include <ggml.h>

namespace graft {

// Whether this CPU runs the int8 product: AVX-512 (F, BW) with VNNI.
bool int8_dx_cpu();

// 16 columns of W (rows of W^T) by 32 rows of W (one Q8_0 block of W^T's
// rows): the Q8_0 values plus 128 as unsigned bytes, column c's values k to
// k + 3 at q[k / 4][4 c .. 4 c + 3], and each column's F16 scale.
struct Q8x16 {
  uint8_t q[8][64];
  uint16_t d[16];
};
static_assert(sizeof(Q8x16) == 544);

// The tensor holding W^T for W [n_in, n_out] (n_in a multiple of 16, n_out
// of 32): I8, one row per 16 columns of W, its n_out / 32 blocks in order.
ggml_tensor* new_q8x16(ggml_context* ctx, int64_t n_in, int64_t n_out);
// Writes rows [o0, o0 + 32 * n_blocks) of W as Q8_0 blocks of W^T: blocks
// holds, for each column i of W, n_blocks Q8_0 blocks (i major).
void set_q8x16_blocks(ggml_tensor* wt, int64_t o0, int64_t n_blocks, const void* q8_0_blocks);

// dx = W^T dy: wt from new_q8x16, dy F32 [n_out, n_rows] with contiguous
// rows. Returns F32 [n_in, n_rows], one node.
ggml_tensor* int8_dx(ggml_context* ctx, ggml_tensor* wt, ggml_tensor* dy);

}  // namespace graft

// The B side of LoRA as one ggml op: for every row, y plus, for each adapter
// the row routes to in turn, scale * B_slot (A_slot x). B is stacked
// transposed ([n_out, rank] per slot) so the product is rank long axpys over
// n_out instead of n_out dot products of length rank, which ggml's matmul
// kernels run slowly; and the scaling and adding are done in the same pass,
// not as two more ops per projection (with 8 rank-16 adapters on every
// projection of the 1B test model, the B side through ggml_mul_mat_id cost
// ~25 % of an 8-row decode step; this way well under 10 %).
#pragma once

#include <ggml.h>

namespace graft {

// y: F32 [n_out, n_rows]; b_stack: F16 or F32 [n_out, rank, n_slots];
// ax: F32 [rank, n_used, n_rows] (A x per row and route entry); slots: I32
// [n_used, n_rows]; scales: F32 [1, n_used, n_rows] (0: no adapter there).
// Returns F32 [n_out, n_rows]: y + scale_u * B_u ax_u added for u = 0, 1, ...
// in turn, each term rounded to float first, exactly as ggml_mul then
// ggml_add per term would round.
ggml_tensor* lora_b_add(ggml_context* ctx, ggml_tensor* y, ggml_tensor* b_stack, ggml_tensor* ax,
                        ggml_tensor* slots, ggml_tensor* scales);

}  // namespace graft

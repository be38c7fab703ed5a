// The B side of LoRA as one ggml op: for every row and each adapter it
// routes to, B_slot (A_slot x), with B stacked transposed ([n_out, rank] per
// slot) so the product is rank long axpys over n_out instead of n_out dot
// products of length rank, which ggml's matmul kernels run slowly (with 8
// rank-16 adapters on every projection of the 1B test model, the B side
// through ggml_mul_mat_id cost ~25 % of an 8-row decode step; this way ~9 %).
#pragma once

#include <ggml.h>

namespace graft {

// b_stack: F16 or F32 [n_out, rank, n_slots]; ax: F32 [rank, n_used, n_rows]
// (A x per row and route entry); slots: I32 [n_used, n_rows].
// Returns F32 [n_out, n_used, n_rows].
ggml_tensor* lora_b_product(ggml_context* ctx, ggml_tensor* b_stack, ggml_tensor* ax, ggml_tensor* slots);

}  // namespace graft

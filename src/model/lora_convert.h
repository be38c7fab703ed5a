// Copying a LoRA matrix (LoraMatrix, in its file's type) into the memory of
// the stacks of a LoraType: byte for byte when the types match, and through
// floats into F32 otherwise (LoraSet stores an adapter in a type other than
// its own only as F32, which holds every value exactly).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <ggml.h>

#include "model/lora.h"

namespace graft {

// The whole matrix, row-major, into dst of type `type`. `scratch` holds the
// floats of a converted matrix.
void copy_rows(const LoraMatrix& m, ggml_type type, void* dst, std::vector<float>& scratch);

// The columns of the n_out x rank matrix m, in type `type`, into one slot of
// a B stack of rank stack_rank (lora_ops.h lora_b_index): column k's output
// o to element lora_b_index(stack_rank, k, o) of dst.
void copy_columns(const LoraMatrix& m, int64_t n_out, int rank, int64_t stack_rank, ggml_type type,
                  uint8_t* dst, std::vector<float>& scratch);

}  // namespace graft

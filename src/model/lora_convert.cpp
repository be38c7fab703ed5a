#include "model/lora_convert.h"

#include <cstring>

#include "model/lora_ops.h"

namespace graft {

namespace {

// m's data in `type`: its own, or its floats in scratch.
const void* data_as(const LoraMatrix& m, ggml_type type, std::vector<float>& scratch) {
  if (m.type == type) return m.data;
  GGML_ASSERT(type == GGML_TYPE_F32);
  scratch.resize(size_t(m.n));
  ggml_get_type_traits(m.type)->to_float(m.data, scratch.data(), m.n);
  return scratch.data();
}

// Column k of the n_out x rank matrix src into B's blocked layout for a
// stack of rank stack_rank (lora_b_index), as elements of T's size.
template <typename T>
void transpose_blocked(const void* src, int64_t n_out, int rank, int64_t stack_rank, uint8_t* dst) {
  const T* in = static_cast<const T*>(src);
  T* out = reinterpret_cast<T*>(dst);
  for (int k = 0; k < rank; ++k) {
    for (int64_t o = 0; o < n_out; ++o) out[lora_b_index(stack_rank, k, o)] = in[o * rank + k];
  }
}

}  // namespace

void copy_rows(const LoraMatrix& m, ggml_type type, void* dst, std::vector<float>& scratch) {
  std::memcpy(dst, data_as(m, type, scratch), ggml_row_size(type, m.n));
}

void copy_columns(const LoraMatrix& m, int64_t n_out, int rank, int64_t stack_rank, ggml_type type,
                  uint8_t* dst, std::vector<float>& scratch) {
  const void* src = data_as(m, type, scratch);
  if (ggml_type_size(type) == 2) {
    transpose_blocked<uint16_t>(src, n_out, rank, stack_rank, dst);
  } else {
    GGML_ASSERT(ggml_type_size(type) == 4);
    transpose_blocked<uint32_t>(src, n_out, rank, stack_rank, dst);
  }
}

}  // namespace graft

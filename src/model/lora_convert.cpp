#include "model/lora_convert.h"

#include <cstring>

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

// dst row k = column k of the n_out x rank matrix src, copied as elements of T's size.
template <typename T>
void transpose(const void* src, int64_t n_out, int rank, uint8_t* dst, size_t row_bytes) {
  const T* in = static_cast<const T*>(src);
  for (int k = 0; k < rank; ++k) {
    T* out = reinterpret_cast<T*>(dst + size_t(k) * row_bytes);
    for (int64_t o = 0; o < n_out; ++o) out[o] = in[o * rank + k];
  }
}

}  // namespace

void copy_rows(const LoraMatrix& m, ggml_type type, void* dst, std::vector<float>& scratch) {
  std::memcpy(dst, data_as(m, type, scratch), ggml_row_size(type, m.n));
}

void copy_columns(const LoraMatrix& m, int64_t n_out, int rank, ggml_type type, uint8_t* dst,
                  size_t row_bytes, std::vector<float>& scratch) {
  const void* src = data_as(m, type, scratch);
  if (ggml_type_size(type) == 2) {
    transpose<uint16_t>(src, n_out, rank, dst, row_bytes);
  } else {
    GGML_ASSERT(ggml_type_size(type) == 4);
    transpose<uint32_t>(src, n_out, rank, dst, row_bytes);
  }
}

}  // namespace graft

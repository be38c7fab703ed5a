// What graft knows of ggml's CPU weight repacking that ggml does not
// publish, all in one place. The CPU backend offers an extra buffer type,
// "CPU_REPACK", whose set_tensor rewrites a weight into a layout its own
// kernels multiply faster (llama.cpp loads weights into it, and so does
// graft's WeightsLoader). Neither the name nor the layouts are public API.
// graft relies on:
// - the name, to find the buffer type (repack_buffer_type);
// - for Q4_0 weights with a multiple of 8 rows on CPUs with AVX2, the layout
//   of ggml-cpu/repack.cpp's block_q4_0x8 with an 8-byte interleave (Q4x8),
//   which q4_rows (model/q4_rows.h) and the training path's frozen_dx
//   (train/) read directly.
// Written against ggml 0.23.0 as bundled with llama.cpp 80fb11a
// (kRepackGgmlVersion). Another ggml may lay Q4_0 out otherwise, so the
// layout is checked once per process, at model load, against ggml's own
// repacking of a known weight (q4x8_layout_is_ggmls); when it differs,
// is_q4x8 is false for every weight and those readers leave the weights to
// ggml's kernels instead of reading them wrong.
#pragma once

#include <cstdint>

#include <ggml-backend.h>
#include <ggml.h>

namespace graft {

inline constexpr const char* kRepackGgmlVersion = "0.23.0";

// The CPU backend's repack buffer type, when this build and CPU have one.
ggml_backend_buffer_type_t repack_buffer_type();

// Whether ggml would repack t in `repack` (asked of the CPU device as for a
// product with t, so only where ggml has a kernel for the repacked layout).
bool repacks(ggml_backend_buffer_type_t repack, const ggml_tensor* t);

// ggml's repacked Q4_0 for 8 weight rows and one 32-column block: the rows'
// 8 F16 scales, then 128 bytes: for half h in {0, 1}, row c, byte j, row c's
// Q4_0 byte 8h + j with both nibbles xor 8. (A Q4_0 byte i holds weight i in
// its low nibble and weight i + 16 in its high one.) Row group g's blocks
// follow one another, column block by column block.
struct Q4x8 {
  uint16_t d[8];
  uint8_t qs[128];
};
static_assert(sizeof(Q4x8) == 144);

// Whether `packed`, a Q4_0 weight [n_in, n_out] in the repack buffer, holds
// `original` (its Q4_0 rows as files store them) laid out as Q4x8: the first
// and the last block are compared byte for byte.
bool q4x8_layout_matches(const ggml_tensor* packed, const void* original);

// Whether this ggml repacks Q4_0 weights into Q4x8 (checked on a known weight
// the first time it is asked; false when there is no repack buffer).
bool q4x8_layout_is_ggmls();

// Whether w is a Q4_0 weight that ggml holds repacked as Q4x8.
bool is_q4x8(const ggml_tensor* w);

}  // namespace graft

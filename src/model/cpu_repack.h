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
//   (train/) read directly;
// - for Q4_K weights with a multiple of 8 rows on CPUs with AVX2, the layout
//   of repack.cpp's block_q4_Kx8 with an 8-byte interleave (Q4Kx8), which
//   q4k_rows (model/q4k_rows.h) reads.
// Written against ggml 0.23.0 as bundled with llama.cpp 80fb11a
// (kRepackGgmlVersion). Another ggml may lay Q4_0 out otherwise, so the
// layouts are checked once per process, at model load, against ggml's own
// repacking of a known weight (q4x8_layout_is_ggmls, q4kx8_layout_is_ggmls);
// when one differs, is_q4x8 (is_q4kx8) is false for every weight and those
// readers leave the weights to ggml's kernels instead of reading them wrong.
#pragma once

#include <cstdint>

#include <ggml-backend.h>
#include <ggml.h>

namespace graft {

inline constexpr const char* kRepackGgmlVersion = "0.23.0";

// The CPU backend's repack buffer type, when this build and CPU have one.
ggml_backend_buffer_type_t repack_buffer_type();

// Whether w is in host memory as files store it: not in the repack buffer
// (a ggml that repacks w's type would hold it there, rewritten).
// Tensors laid out without data (Model::load_layout) count too.
bool stored_as_file(const ggml_tensor* w);

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

// ggml's repacked Q4_K for 8 weight rows (c) and one 256-column block, made
// of 8 sub-blocks of 32 columns with a 6-bit scale and min each: the rows'
// F16 scales d and mins' scales dmin; then for each sub-block g, 12 bytes
// holding its 8 rows' scales s[c] and mins m[c] (6 bits): bytes c < 4 hold
// s[c] | (s[c + 4] >> 4) << 6, bytes 4 + c m[c] | (m[c + 4] >> 4) << 6,
// bytes 8 + c (s[c + 4] & 15) | (m[c + 4] & 15) << 4; then 16 chunks k of
// 64 bytes, row c's 8 bytes at 8c: its Q4_K bytes 8k .. 8k + 7. (A Q4_K
// byte 32j + i holds weight 64j + i in its low nibble and 64j + 32 + i in its
// high one.) Row group g's blocks follow one another, as for Q4x8.
struct Q4Kx8 {
  uint16_t d[8];
  uint16_t dmin[8];
  uint8_t scales[96];
  uint8_t qs[1024];
};
static_assert(sizeof(Q4Kx8) == 1152);

// Whether `packed`, a Q4_K weight [n_in, n_out] in the repack buffer, holds
// `original` (its Q4_K rows as files store them) laid out as Q4Kx8: the first
// and the last block are compared byte for byte.
bool q4kx8_layout_matches(const ggml_tensor* packed, const void* original);

// Whether this ggml repacks Q4_K weights into Q4Kx8 (checked on a known
// weight the first time it is asked; false when there is no repack buffer).
bool q4kx8_layout_is_ggmls();

// Whether w is a Q4_K weight that ggml holds repacked as Q4Kx8.
bool is_q4kx8(const ggml_tensor* w);

}  // namespace graft

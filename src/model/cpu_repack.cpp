#include "model/cpu_repack.h"

#include <cstring>
#include <utility>
#include <vector>

#include <ggml-cpp.h>
#include <ggml-cpu.h>

namespace graft {

namespace {

constexpr int64_t kQ4Block = 32;

// A Q4_0 block as files store it.
struct Q4Block {
  uint16_t d;
  uint8_t qs[16];
};
static_assert(sizeof(Q4Block) == 18);

constexpr int64_t kQ4KBlock = 256;

// A Q4_K block as files store it: sub-block g's 6-bit scale and min packed
// into `scales` (for g < 4: scales[g] and scales[4 + g], low 6 bits; for
// g >= 4: the low 4 bits in scales[4 + g], low and high nibble, and the high
// 2 bits in the top bits of scales[g - 4] and scales[g]).
struct Q4KBlock {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
static_assert(sizeof(Q4KBlock) == 144);

// Sub-block g's scale and min of a Q4_K block.
std::pair<uint8_t, uint8_t> q4k_scale_min(const Q4KBlock& b, int g) {
  const uint8_t* q = b.scales;
  if (g < 4) return {uint8_t(q[g] & 63), uint8_t(q[g + 4] & 63)};
  return {uint8_t((q[g + 4] & 15) | ((q[g - 4] >> 6) << 4)), uint8_t((q[g + 4] >> 4) | ((q[g] >> 6) << 4))};
}

// Eight rows' blocks in rows[c * stride] as Q4Kx8 (cpu_repack.h).
Q4Kx8 to_q4kx8(const Q4KBlock* rows, int64_t stride) {
  Q4Kx8 out;
  for (int c = 0; c < 8; ++c) {
    const Q4KBlock& in = rows[c * stride];
    out.d[c] = in.d;
    out.dmin[c] = in.dmin;
    for (int k = 0; k < 16; ++k) std::memcpy(out.qs + 64 * k + 8 * c, in.qs + 8 * k, 8);
  }
  for (int g = 0; g < 8; ++g) {
    uint8_t* o = out.scales + 12 * g;
    for (int c = 0; c < 4; ++c) {
      const auto [s, m] = q4k_scale_min(rows[c * stride], g);
      const auto [s4, m4] = q4k_scale_min(rows[(c + 4) * stride], g);
      o[c] = uint8_t(s | (s4 >> 4) << 6);
      o[4 + c] = uint8_t(m | (m4 >> 4) << 6);
      o[8 + c] = uint8_t((s4 & 15) | (m4 & 15) << 4);
    }
  }
  return out;
}

}  // namespace

ggml_backend_buffer_type_t repack_buffer_type() {
  static const ggml_backend_buffer_type_t found = []() -> ggml_backend_buffer_type_t {
    ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!dev) return nullptr;
    auto get_extra = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(ggml_backend_reg_get_proc_address(
        ggml_backend_dev_backend_reg(dev), "ggml_backend_dev_get_extra_bufts"));
    if (!get_extra) return nullptr;
    for (ggml_backend_buffer_type_t* b = get_extra(dev); b && *b; ++b) {
      if (std::strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) return *b;
    }
    return nullptr;
  }();
  return found;
}

bool stored_as_file(const ggml_tensor* w) {
  if (!w->buffer || !ggml_backend_buffer_is_host(w->buffer)) return false;
  ggml_backend_buffer_type_t repack = repack_buffer_type();
  return !repack || ggml_backend_buffer_get_type(w->buffer) != repack;
}

bool repacks(ggml_backend_buffer_type_t repack, const ggml_tensor* t) {
  if (!repack) return false;
  ggml_init_params params{};
  params.mem_size = ggml_tensor_overhead() * 4;
  params.no_alloc = true;
  ggml_context_ptr ctx(ggml_init(params));
  ggml_backend_buffer_ptr dummy(ggml_backend_buft_alloc_buffer(repack, 0));
  if (!ctx || !dummy) return false;
  ggml_tensor* w = ggml_new_tensor_2d(ctx.get(), t->type, t->ne[0], t->ne[1]);
  w->buffer = dummy.get();
  ggml_tensor* x = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, t->ne[0], 512);
  ggml_tensor* op = ggml_mul_mat(ctx.get(), w, x);
  const bool ok = ggml_backend_dev_supports_op(ggml_backend_buft_get_device(repack), op);
  w->buffer = nullptr;
  return ok;
}

bool q4x8_layout_matches(const ggml_tensor* packed, const void* original) {
  if (packed->type != GGML_TYPE_Q4_0 || packed->ne[0] % kQ4Block != 0 || packed->ne[1] % 8 != 0 ||
      packed->ne[1] == 0 || ggml_nrows(packed) != packed->ne[1] || !packed->data) {
    return false;
  }
  const int64_t nb = packed->ne[0] / kQ4Block;
  const int64_t n_groups = packed->ne[1] / 8;
  const auto* rows = static_cast<const Q4Block*>(original);
  const auto* groups = static_cast<const Q4x8*>(packed->data);
  for (const auto& [g, b] : {std::pair<int64_t, int64_t>{0, 0}, {n_groups - 1, nb - 1}}) {
    Q4x8 want;
    for (int c = 0; c < 8; ++c) {
      const Q4Block& in = rows[(g * 8 + c) * nb + b];
      want.d[c] = in.d;
      for (int h = 0; h < 2; ++h) {
        for (int j = 0; j < 8; ++j) want.qs[h * 64 + c * 8 + j] = uint8_t(in.qs[8 * h + j] ^ 0x88);
      }
    }
    if (std::memcmp(&want, &groups[g * nb + b], sizeof(Q4x8)) != 0) return false;
  }
  return true;
}

bool q4x8_layout_is_ggmls() {
  static const bool same = [] {
    ggml_backend_buffer_type_t repack = repack_buffer_type();
    if (!repack) return false;
    // 16 rows of 64 columns, every byte and scale distinct enough to show a
    // misplaced one.
    const int64_t n_in = 64, n_out = 16;
    std::vector<Q4Block> blocks(size_t(n_out * n_in / kQ4Block));
    for (size_t i = 0; i < blocks.size(); ++i) {
      blocks[i].d = ggml_fp32_to_fp16(float(i + 1) / 64.0f);
      for (int k = 0; k < 16; ++k) blocks[i].qs[k] = uint8_t(i * 37 + size_t(k) * 11 + 5);
    }
    ggml_init_params params{};
    params.mem_size = ggml_tensor_overhead() * 2;
    params.no_alloc = true;
    ggml_context_ptr ctx(ggml_init(params));
    ggml_tensor* w = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_Q4_0, n_in, n_out);
    if (!repacks(repack, w)) return false;
    ggml_backend_buffer_ptr buffer(ggml_backend_alloc_ctx_tensors_from_buft(ctx.get(), repack));
    if (!buffer) return false;
    ggml_backend_tensor_set(w, blocks.data(), 0, blocks.size() * sizeof(Q4Block));  // repacks
    return q4x8_layout_matches(w, blocks.data());
  }();
  return same;
}

bool q4kx8_layout_matches(const ggml_tensor* packed, const void* original) {
  if (packed->type != GGML_TYPE_Q4_K || packed->ne[0] % kQ4KBlock != 0 || packed->ne[1] % 8 != 0 ||
      packed->ne[1] == 0 || ggml_nrows(packed) != packed->ne[1] || !packed->data) {
    return false;
  }
  const int64_t nb = packed->ne[0] / kQ4KBlock;
  const int64_t n_groups = packed->ne[1] / 8;
  const auto* rows = static_cast<const Q4KBlock*>(original);
  const auto* groups = static_cast<const Q4Kx8*>(packed->data);
  for (const auto& [g, b] : {std::pair<int64_t, int64_t>{0, 0}, {n_groups - 1, nb - 1}}) {
    const Q4Kx8 want = to_q4kx8(rows + g * 8 * nb + b, nb);
    if (std::memcmp(&want, &groups[g * nb + b], sizeof(Q4Kx8)) != 0) return false;
  }
  return true;
}

bool q4kx8_layout_is_ggmls() {
  static const bool same = [] {
    ggml_backend_buffer_type_t repack = repack_buffer_type();
    if (!repack) return false;
    // 16 rows of 512 columns, every byte, scale and min distinct enough to
    // show a misplaced one (the scales' bytes take all 8 bit values).
    const int64_t n_in = 512, n_out = 16;
    std::vector<Q4KBlock> blocks(size_t(n_out * n_in / kQ4KBlock));
    for (size_t i = 0; i < blocks.size(); ++i) {
      blocks[i].d = ggml_fp32_to_fp16(float(i + 1) / 64.0f);
      blocks[i].dmin = ggml_fp32_to_fp16(float(i + 3) / 128.0f);
      for (int k = 0; k < 12; ++k) blocks[i].scales[k] = uint8_t(i * 29 + size_t(k) * 53 + 7);
      for (int k = 0; k < 128; ++k) blocks[i].qs[k] = uint8_t(i * 37 + size_t(k) * 11 + 5);
    }
    ggml_init_params params{};
    params.mem_size = ggml_tensor_overhead() * 2;
    params.no_alloc = true;
    ggml_context_ptr ctx(ggml_init(params));
    ggml_tensor* w = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_Q4_K, n_in, n_out);
    if (!repacks(repack, w)) return false;
    ggml_backend_buffer_ptr buffer(ggml_backend_alloc_ctx_tensors_from_buft(ctx.get(), repack));
    if (!buffer) return false;
    ggml_backend_tensor_set(w, blocks.data(), 0, blocks.size() * sizeof(Q4KBlock));  // repacks
    return q4kx8_layout_matches(w, blocks.data());
  }();
  return same;
}

bool is_q4kx8(const ggml_tensor* w) {
  if (w->type != GGML_TYPE_Q4_K || w->ne[1] % 8 != 0 || w->ne[2] != 1 || w->ne[3] != 1 || !w->buffer) {
    return false;
  }
  ggml_backend_buffer_type_t repack = repack_buffer_type();
  return repack && ggml_backend_buffer_get_type(w->buffer) == repack && q4kx8_layout_is_ggmls();
}

bool is_q4x8(const ggml_tensor* w) {
  if (w->type != GGML_TYPE_Q4_0 || w->ne[1] % 8 != 0 || w->ne[2] != 1 || w->ne[3] != 1 || !w->buffer) {
    return false;
  }
  ggml_backend_buffer_type_t repack = repack_buffer_type();
  return repack && ggml_backend_buffer_get_type(w->buffer) == repack && q4x8_layout_is_ggmls();
}

}  // namespace graft

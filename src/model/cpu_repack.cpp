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

bool is_q4x8(const ggml_tensor* w) {
  if (w->type != GGML_TYPE_Q4_0 || w->ne[1] % 8 != 0 || w->ne[2] != 1 || w->ne[3] != 1 || !w->buffer) {
    return false;
  }
  ggml_backend_buffer_type_t repack = repack_buffer_type();
  return repack && ggml_backend_buffer_get_type(w->buffer) == repack && q4x8_layout_is_ggmls();
}

}  // namespace graft

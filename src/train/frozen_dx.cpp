// frozen_dx (train_ops.h): dx = W^T dy for a frozen weight W.
//
// Each thread owns a range of W's columns (dx's elements), so no two threads
// write the same output and no reduction is needed. For each tile of W
// (kChunkRows rows x kTileCols columns) it dequantizes the tile once into
// 16-column strips, then, for every group of up to kRowBlock rows of dy, runs
// a register-blocked kernel: per weight row, two 8-float loads of the strip
// and one broadcast of dy per output row feed 2 x kRowBlock fused
// multiply-adds.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include <ggml-cpu.h>

#include "model/cpu_repack.h"
#include "train/int8_dx.h"
#include "train/train_ops.h"

namespace graft {

namespace {

constexpr int kStrip = 16;       // columns per kernel strip
constexpr int kChunkRows = 128;  // W rows per tile
constexpr int kTileCols = 256;   // W columns per tile
constexpr int kRowBlock = 6;     // dx rows per kernel call
constexpr int kQ4Block = 32;

// Whether w is held in ggml's repack buffer (only the Q4x8 layout of
// cpu_repack.h, checked against ggml's own, is read here).
bool is_repacked(const ggml_tensor* w) {
  static const ggml_backend_buffer_type_t repack = repack_buffer_type();
  return repack && w->buffer && ggml_backend_buffer_get_type(w->buffer) == repack;
}

// Columns of one unit of the thread split: a whole quantization block, and
// a whole number of strips.
// (F32 weights: one strip, so that LoRA's rank-wide products qualify.)
int64_t column_unit(const ggml_tensor* w) {
  if (w->type == GGML_TYPE_F32) return kStrip;
  return std::max<int64_t>(ggml_blck_size(w->type), kQ4Block);
}

// Rows [o0, o0 + n_rows) x columns [c0, c0 + n_cols) of w as floats, strip
// by strip: tile[(s * kChunkRows + o) * kStrip + j] = W[o0 + o][c0 + 16 s + j].
void load_tile(const ggml_tensor* w, bool repacked, int64_t o0, int n_rows, int64_t c0, int n_cols,
               float* tile, std::vector<float>& row) {
  if (repacked) {
    const int64_t n_blocks = w->ne[0] / kQ4Block;
    const auto* blocks = static_cast<const Q4x8*>(w->data);
    for (int64_t g = o0 / 8; g < (o0 + n_rows) / 8; ++g) {
      for (int64_t x = c0 / kQ4Block; x < (c0 + n_cols) / kQ4Block; ++x) {
        const Q4x8& b = blocks[g * n_blocks + x];
        for (int c = 0; c < 8; ++c) {
          const float d = ggml_fp16_to_fp32(b.d[c]);
          float* out_row = tile + (g * 8 + c - o0) * kStrip;
          const int64_t col0 = x * kQ4Block - c0;
          for (int h = 0; h < 2; ++h) {
            for (int j = 0; j < 8; ++j) {
              const uint8_t q = b.qs[h * 64 + c * 8 + j] ^ 0x88;
              const int64_t lo = col0 + 8 * h + j;
              const int64_t hi = lo + 16;
              out_row[(lo / kStrip) * kChunkRows * kStrip + lo % kStrip] = float(int(q & 0x0F) - 8) * d;
              out_row[(hi / kStrip) * kChunkRows * kStrip + hi % kStrip] = float(int(q >> 4) - 8) * d;
            }
          }
        }
      }
    }
    return;
  }
  const auto* traits = ggml_get_type_traits(w->type);
  const size_t col_offset = size_t(c0 / traits->blck_size) * traits->type_size;
  row.resize(size_t(n_cols));
  for (int o = 0; o < n_rows; ++o) {
    const char* src = static_cast<const char*>(w->data) + (o0 + o) * w->nb[1] + col_offset;
    const float* values = reinterpret_cast<const float*>(src);
    if (w->type != GGML_TYPE_F32) {
      traits->to_float(src, row.data(), n_cols);
      values = row.data();
    }
    for (int s = 0; s < n_cols / kStrip; ++s) {
      std::memcpy(tile + (size_t(s) * kChunkRows + o) * kStrip, values + s * kStrip, kStrip * sizeof(float));
    }
  }
}

// dst rows i < NR, 16 columns: dst[i] (+)= sum_o g[i * ldg + o] * strip[o].
template <int NR>
void strip_kernel_generic(const float* strip, int n, const float* g, int ldg, float* dst, int64_t ldd,
                          bool add) {
  float acc[NR][kStrip];
  for (int i = 0; i < NR; ++i) {
    for (int j = 0; j < kStrip; ++j) acc[i][j] = add ? dst[i * ldd + j] : 0.0f;
  }
  for (int o = 0; o < n; ++o) {
    for (int i = 0; i < NR; ++i) {
      const float gi = g[i * ldg + o];
      for (int j = 0; j < kStrip; ++j) acc[i][j] += gi * strip[o * kStrip + j];
    }
  }
  for (int i = 0; i < NR; ++i) std::memcpy(dst + i * ldd, acc[i], sizeof(acc[i]));
}

#if defined(__x86_64__)
template <int NR>
__attribute__((target("avx2,fma"))) void strip_kernel_avx2(const float* strip, int n, const float* g, int ldg,
                                                           float* dst, int64_t ldd, bool add) {
  __m256 acc[NR][2];
  for (int i = 0; i < NR; ++i) {
    acc[i][0] = add ? _mm256_loadu_ps(dst + i * ldd) : _mm256_setzero_ps();
    acc[i][1] = add ? _mm256_loadu_ps(dst + i * ldd + 8) : _mm256_setzero_ps();
  }
  for (int o = 0; o < n; ++o) {
    const __m256 t0 = _mm256_loadu_ps(strip + o * kStrip);
    const __m256 t1 = _mm256_loadu_ps(strip + o * kStrip + 8);
    for (int i = 0; i < NR; ++i) {
      const __m256 gi = _mm256_broadcast_ss(g + i * ldg + o);
      acc[i][0] = _mm256_fmadd_ps(gi, t0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(gi, t1, acc[i][1]);
    }
  }
  for (int i = 0; i < NR; ++i) {
    _mm256_storeu_ps(dst + i * ldd, acc[i][0]);
    _mm256_storeu_ps(dst + i * ldd + 8, acc[i][1]);
  }
}

bool cpu_has_avx2_fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif

using StripKernel = void (*)(const float*, int, const float*, int, float*, int64_t, bool);

template <int NR>
StripKernel pick_kernel() {
#if defined(__x86_64__)
  if (cpu_has_avx2_fma()) return strip_kernel_avx2<NR>;
#endif
  return strip_kernel_generic<NR>;
}

StripKernel kernel_for(int n_rows) {
  static const StripKernel kernels[kRowBlock] = {pick_kernel<1>(), pick_kernel<2>(), pick_kernel<3>(),
                                                 pick_kernel<4>(), pick_kernel<5>(), pick_kernel<6>()};
  return kernels[n_rows - 1];
}

// dst: F32 [n_in, n_rows]; src[0] = W [n_in, n_out]; src[1] = dy_t [n_rows, n_out].
void frozen_dx_kernel(ggml_tensor* dst, int ith, int nth, void*) {
  const ggml_tensor* w = dst->src[0];
  const ggml_tensor* dy = dst->src[1];
  const int64_t n_in = w->ne[0];
  const int64_t n_out = w->ne[1];
  const int64_t n_rows = dst->ne[1];
  const bool repacked = is_repacked(w);
  const int64_t unit = column_unit(w);
  const int64_t n_units = n_in / unit;
  // Threads split W's columns, or, when there are fewer column units than
  // threads (a narrow F32 weight), dx's rows.
  const bool split_rows = n_units < nth;
  const int64_t c_begin = split_rows ? 0 : n_units * ith / nth * unit;
  const int64_t c_end = split_rows ? n_in : n_units * (ith + 1) / nth * unit;
  const int64_t r_begin = split_rows ? n_rows * ith / nth : 0;
  const int64_t r_end = split_rows ? n_rows * (ith + 1) / nth : n_rows;
  if (c_begin == c_end || r_begin == r_end) return;

  thread_local std::vector<float> tile, packed_dy, row;
  tile.resize(size_t(kChunkRows) * kTileCols);
  packed_dy.resize(size_t(n_rows) * kChunkRows);
  const size_t ldd = dst->nb[1] / sizeof(float);
  auto* out = static_cast<float*>(dst->data);

  for (int64_t c0 = c_begin; c0 < c_end; c0 += kTileCols) {
    const int n_cols = int(std::min<int64_t>(kTileCols, c_end - c0));
    for (int64_t o0 = 0; o0 < n_out; o0 += kChunkRows) {
      const int n = int(std::min<int64_t>(kChunkRows, n_out - o0));
      load_tile(w, repacked, o0, n, c0, n_cols, tile.data(), row);
      // dy rows as the kernel reads them: packed_dy[r * kChunkRows + o] = dy[o0 + o][r].
      for (int64_t r = r_begin; r < r_end; ++r) {
        const char* src = static_cast<const char*>(dy->data) + r * dy->nb[0] + o0 * dy->nb[1];
        float* p = packed_dy.data() + r * kChunkRows;
        for (int o = 0; o < n; ++o) p[o] = *reinterpret_cast<const float*>(src + o * dy->nb[1]);
      }
      for (int64_t r0 = r_begin; r0 < r_end; r0 += kRowBlock) {
        const int nr = int(std::min<int64_t>(kRowBlock, r_end - r0));
        const StripKernel kernel = kernel_for(nr);
        for (int s = 0; s < n_cols / kStrip; ++s) {
          kernel(tile.data() + size_t(s) * kChunkRows * kStrip, n, packed_dy.data() + r0 * kChunkRows,
                 kChunkRows, out + r0 * ldd + c0 + s * kStrip, int64_t(ldd), o0 > 0);
        }
      }
    }
  }
}

// Rows [o0, o0 + n_rows) of w as floats, row after row: out[o * n_in + i] =
// W[o0 + o][i]. For a repacked weight, o0 and n_rows are multiples of 8.
void dequantize_rows(const ggml_tensor* w, bool repacked, int64_t o0, int n_rows, float* out) {
  const int64_t n_in = w->ne[0];
  if (repacked) {
    const int64_t n_blocks = n_in / kQ4Block;
    const auto* blocks = static_cast<const Q4x8*>(w->data);
    for (int64_t g = o0 / 8; g < (o0 + n_rows) / 8; ++g) {
      for (int64_t x = 0; x < n_blocks; ++x) {
        const Q4x8& b = blocks[g * n_blocks + x];
        for (int c = 0; c < 8; ++c) {
          const float d = ggml_fp16_to_fp32(b.d[c]);
          float* dst = out + (g * 8 + c - o0) * n_in + x * kQ4Block;
          for (int h = 0; h < 2; ++h) {
            for (int j = 0; j < 8; ++j) {
              const uint8_t q = b.qs[h * 64 + c * 8 + j] ^ 0x88;
              dst[8 * h + j] = float(int(q & 0x0F) - 8) * d;
              dst[8 * h + j + 16] = float(int(q >> 4) - 8) * d;
            }
          }
        }
      }
    }
    return;
  }
  const auto* traits = ggml_get_type_traits(w->type);
  for (int o = 0; o < n_rows; ++o) {
    traits->to_float(static_cast<const char*>(w->data) + (o0 + o) * w->nb[1], out + int64_t(o) * n_in, n_in);
  }
}

constexpr int kTransposeRows = 128;  // W rows per task of FrozenTransposes::build (a multiple of 32)

// Q8_0 blocks [o0 / 32, (o0 + n_rows) / 32) of every row of wt = W^T (a
// Q8_0 tensor, or Q8x16 rows for int8_dx).
void transpose_rows(const ggml_tensor* w, ggml_tensor* wt, int64_t o0, int n_rows, std::vector<float>& rows,
                    std::vector<float>& column, std::vector<uint8_t>& blocks) {
  const int64_t n_in = w->ne[0];
  rows.resize(size_t(n_rows) * size_t(n_in));
  column.resize(size_t(n_rows));
  const size_t block_bytes = ggml_row_size(GGML_TYPE_Q8_0, n_rows);
  blocks.resize(block_bytes * size_t(n_in));
  dequantize_rows(w, is_repacked(w), o0, n_rows, rows.data());
  const auto quantize = ggml_get_type_traits_cpu(GGML_TYPE_Q8_0)->from_float;
  for (int64_t i = 0; i < n_in; ++i) {
    for (int o = 0; o < n_rows; ++o) column[size_t(o)] = rows[size_t(o) * size_t(n_in) + size_t(i)];
    quantize(column.data(), blocks.data() + size_t(i) * block_bytes, n_rows);
  }
  if (wt->type == GGML_TYPE_I8) {
    set_q8x16_blocks(wt, o0, n_rows / 32, blocks.data());
    return;
  }
  const size_t offset = ggml_row_size(GGML_TYPE_Q8_0, o0);
  for (int64_t i = 0; i < n_in; ++i) {
    std::memcpy(static_cast<char*>(wt->data) + i * wt->nb[1] + offset,
                blocks.data() + size_t(i) * block_bytes, block_bytes);
  }
}

}  // namespace

bool frozen_dx_supported(const ggml_tensor* w) {
  if (w->ne[0] % column_unit(w) != 0 || w->ne[2] != 1 || w->ne[3] != 1) return false;
  if (is_repacked(w)) return is_q4x8(w) && w->ne[0] % kQ4Block == 0;
  if (w->nb[0] != ggml_type_size(w->type)) return false;
  const auto* traits = ggml_get_type_traits(w->type);
  return w->type == GGML_TYPE_F32 || (traits->to_float && w->ne[0] % column_unit(w) == 0);
}

void FrozenTransposes::build(const std::vector<const ggml_tensor*>& weights, int n_threads) {
  std::vector<const ggml_tensor*> chosen;
  for (const ggml_tensor* w : weights) {
    if (!w || map_.count(w) || std::find(chosen.begin(), chosen.end(), w) != chosen.end()) continue;
    if (!ggml_is_quantized(w->type) || !frozen_dx_supported(w) || w->ne[1] % kQ4Block != 0) continue;
    chosen.push_back(w);
  }
  if (chosen.empty()) return;
  ggml_init_params params{};
  params.mem_size = ggml_tensor_overhead() * chosen.size();
  params.no_alloc = true;
  ctx_.reset(ggml_init(params));
  std::vector<ggml_tensor*> copies;
  for (const ggml_tensor* w : chosen) {
    // Graft's own layout where its int8 product runs, else Q8_0 for ggml's.
    const bool q8x16 = int8_dx_cpu() && w->ne[0] % 16 == 0;
    copies.push_back(q8x16 ? new_q8x16(ctx_.get(), w->ne[0], w->ne[1])
                           : ggml_new_tensor_2d(ctx_.get(), GGML_TYPE_Q8_0, w->ne[1], w->ne[0]));
    ggml_format_name(copies.back(), "%s.t_q8", w->name);
  }
  buffer_.reset(ggml_backend_alloc_ctx_tensors_from_buft(ctx_.get(), ggml_backend_cpu_buffer_type()));
  GGML_ASSERT(buffer_ && "out of memory for the transposed weights");
  // Tasks: kTransposeRows rows of one weight each, taken in turn by the threads.
  struct Task {
    size_t weight;
    int64_t o0;
  };
  std::vector<Task> tasks;
  for (size_t k = 0; k < chosen.size(); ++k) {
    for (int64_t o0 = 0; o0 < chosen[k]->ne[1]; o0 += kTransposeRows) tasks.push_back({k, o0});
  }
  std::atomic<size_t> next{0};
  auto work = [&] {
    std::vector<float> rows, column;
    std::vector<uint8_t> blocks;
    for (size_t t; (t = next.fetch_add(1)) < tasks.size();) {
      const ggml_tensor* w = chosen[tasks[t].weight];
      const int n = int(std::min<int64_t>(kTransposeRows, w->ne[1] - tasks[t].o0));
      transpose_rows(w, copies[tasks[t].weight], tasks[t].o0, n, rows, column, blocks);
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < std::max(1, n_threads); ++i) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  for (size_t k = 0; k < chosen.size(); ++k) map_[chosen[k]] = copies[k];
}

ggml_tensor* FrozenTransposes::find(const ggml_tensor* w) const {
  auto it = map_.find(w);
  return it == map_.end() ? nullptr : it->second;
}

size_t FrozenTransposes::bytes() const {
  return buffer_ ? ggml_backend_buffer_get_size(buffer_.get()) : 0;
}

namespace {

// dy for the int8 product: the tensor dy_t is the transpose view of, when
// its rows are contiguous floats.
ggml_tensor* untransposed(ggml_tensor* dy_t) {
  if (dy_t->op != GGML_OP_TRANSPOSE) return nullptr;
  ggml_tensor* dy = dy_t->src[0];
  if (dy->type != GGML_TYPE_F32 || dy->nb[0] != sizeof(float) || dy->ne[2] != 1 || dy->ne[3] != 1)
    return nullptr;
  return dy;
}

}  // namespace

ggml_tensor* frozen_dx(ggml_context* ctx, ggml_tensor* w, ggml_tensor* dy_t,
                       const FrozenTransposes* transposes) {
  GGML_ASSERT(frozen_dx_supported(w));
  GGML_ASSERT(dy_t->type == GGML_TYPE_F32 && dy_t->ne[1] == w->ne[1]);
  if (ggml_tensor* wt = transposes ? transposes->find(w) : nullptr) {
    if (ggml_tensor* dy = untransposed(dy_t))
      return wt->type == GGML_TYPE_I8 ? int8_dx(ctx, wt, dy) : ggml_mul_mat(ctx, wt, dy);
  }
  ggml_tensor* args[2] = {w, dy_t};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, w->ne[0], dy_t->ne[0], 1, 1, args, 2, frozen_dx_kernel,
                        GGML_N_TASKS_MAX, nullptr);
}

int use_frozen_dx(ggml_context* ctx, ggml_cgraph* graph, const FrozenTransposes* transposes) {
  int replaced = 0;
  for (int i = 0; i < ggml_graph_n_nodes(graph); ++i) {
    ggml_tensor* node = ggml_graph_node(graph, i);
    if (node->op != GGML_OP_OUT_PROD) continue;
    ggml_tensor* w = node->src[0];
    const bool frozen =
        w->op == GGML_OP_NONE && !(w->flags & (GGML_TENSOR_FLAG_PARAM | GGML_TENSOR_FLAG_INPUT));
    if (!frozen) continue;
    if (!frozen_dx_supported(w) || node->src[1]->type != GGML_TYPE_F32) continue;
    if (node->ne[2] != 1 || node->ne[3] != 1) continue;
    replace_node_op(node, frozen_dx(ctx, w, node->src[1], transposes));
    ++replaced;
  }
  return replaced;
}

}  // namespace graft

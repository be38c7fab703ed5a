// lora_add against ggml's own ops, bit for bit, over several rows, each on
// its own slots, at 1-3 threads: A x as ggml_mul_mat_id gives it on the A
// stack (as graft's graph computed it before lora_add), then each term as
// ggml_mul_mat(B, A x), ggml_scale and ggml_add give it for a B of that type
// (how llama.cpp applies an adapter), for F16, BF16 and F32 adapters, at the
// ranks ggml sums in order and past them, and for stacks that mix types in
// one row.
#include "model/lora_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <ggml-cpu.h>
#include <gtest/gtest.h>

#include "model/lora.h"

namespace graft {
namespace {

// Not multiples of the kernel's 16 or 256 outputs, nor of ggml's SIMD step
// (64 with AVX-512) for A's dot products.
constexpr int64_t kOut = 600;
constexpr int64_t kIn = 200;
constexpr int64_t kSlots = 3;

struct Term {
  ggml_type type;
  int rank;        // the adapter's own rank
  int stack_rank;  // the stack's padded rank
  float scale;
};

std::vector<float> random_values(size_t n, unsigned seed, float size) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, size);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

void store(ggml_tensor* t, const std::vector<float>& values) {
  if (t->type == GGML_TYPE_F32) {
    std::memcpy(t->data, values.data(), values.size() * sizeof(float));
  } else if (t->type == GGML_TYPE_F16) {
    ggml_fp32_to_fp16_row(values.data(), static_cast<ggml_fp16_t*>(t->data), int64_t(values.size()));
  } else {
    ggml_fp32_to_bf16_row(values.data(), static_cast<ggml_bf16_t*>(t->data), int64_t(values.size()));
  }
}

int type_index(ggml_type type) {
  for (int t = 0; t < kLoraTypeCount; ++t) {
    if (ggml_type_of(LoraType(t)) == type) return t;
  }
  return -1;
}

// Row r's slot for every term: slots 1 and 2 in turn (slot 0 stays unused).
int32_t slot_of(int64_t r) {
  return int32_t(1 + r % 2);
}

// y + the terms in order, for each of n_rows rows: by ggml's ops and by
// lora_add, on n_threads. Each term's type must differ from the others'.
std::pair<std::vector<float>, std::vector<float>> both_ways(const std::vector<Term>& terms, unsigned seed,
                                                            int64_t n_rows, int n_threads) {
  ggml_init_params params{};
  params.mem_size = size_t(64) << 20;
  ggml_context* ctx = ggml_init(params);
  ggml_cgraph* graph = ggml_new_graph_custom(ctx, 4096, false);
  const int64_t n_used = int64_t(terms.size());

  ggml_tensor* y = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, kOut, n_rows);
  store(y, random_values(size_t(kOut * n_rows), seed, 1.0f));
  ggml_tensor* x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, kIn, n_rows);
  store(x, random_values(size_t(kIn * n_rows), seed + 1, 1.0f));
  ggml_tensor* routes = ggml_new_tensor_3d(ctx, GGML_TYPE_I32, n_used, n_rows, kLoraRoutePlanes);
  std::memset(routes->data, 0, ggml_nbytes(routes));
  std::vector<LoraSet::Stack> groups;
  std::vector<ggml_tensor*> want(static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r)
    want[size_t(r)] = ggml_view_2d(ctx, y, kOut, 1, y->nb[1], size_t(r) * y->nb[1]);
  for (int64_t u = 0; u < n_used; ++u) {
    const Term& t = terms[size_t(u)];
    const unsigned term_seed = seed + 10 * unsigned(u + 1);
    // The stacks, each slot's rank padded with zeros: A [kIn, stack_rank,
    // kSlots] and B transposed and blocked (new_lora_b_stack); and ggml's B
    // of each slot, [rank, kOut] as llama.cpp holds it.
    ggml_tensor* a_stack = ggml_new_tensor_3d(ctx, t.type, kIn, t.stack_rank, kSlots);
    ggml_tensor* b_stack = new_lora_b_stack(ctx, t.type, kOut, t.stack_rank, kSlots);
    std::vector<float> a_stacked(size_t(ggml_nelements(a_stack)), 0.0f);
    std::vector<float> b_stacked(size_t(ggml_nelements(b_stack)), 0.0f);
    const int64_t b_slot = b_stack->ne[0] * b_stack->ne[1];
    std::vector<ggml_tensor*> b_ref(static_cast<size_t>(kSlots));
    for (int64_t s = 0; s < kSlots; ++s) {
      const std::vector<float> a = random_values(size_t(kIn * t.rank), term_seed + unsigned(2 * s), 0.5f);
      const std::vector<float> b =
          random_values(size_t(kOut * t.rank), term_seed + unsigned(2 * s + 1), 0.5f);
      std::copy(a.begin(), a.end(), a_stacked.begin() + s * kIn * t.stack_rank);
      for (int k = 0; k < t.rank; ++k) {
        for (int64_t o = 0; o < kOut; ++o)
          b_stacked[size_t(s * b_slot + lora_b_index(t.stack_rank, k, o))] = b[size_t(o * t.rank + k)];
      }
      b_ref[size_t(s)] = ggml_new_tensor_2d(ctx, t.type, t.rank, kOut);
      store(b_ref[size_t(s)], b);
    }
    store(a_stack, a_stacked);
    store(b_stack, b_stacked);
    groups.push_back({a_stack, b_stack});

    const int type = type_index(t.type);
    ggml_tensor* ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, 1, n_rows);
    for (int64_t r = 0; r < n_rows; ++r) {
      static_cast<int32_t*>(ids->data)[r] = slot_of(r);
      static_cast<int32_t*>(routes->data)[r * n_used + u] = type;
      static_cast<int32_t*>(routes->data)[((1 + type) * n_rows + r) * n_used + u] = slot_of(r);
      std::memcpy(static_cast<int32_t*>(routes->data) + ((kLoraRoutePlanes - 1) * n_rows + r) * n_used + u,
                  &t.scale, sizeof(float));
    }
    // ggml's way: A x by ggml_mul_mat_id, then per row B (A x) (the
    // adapter's own rank of it), scaled, added.
    ggml_tensor* ax = ggml_mul_mat_id(ctx, a_stack, ggml_reshape_3d(ctx, x, kIn, 1, n_rows), ids);
    for (int64_t r = 0; r < n_rows; ++r) {
      ggml_tensor* ax_row = ggml_view_2d(ctx, ax, t.rank, 1, ax->nb[1], size_t(r) * ax->nb[2]);
      ggml_tensor* term = ggml_scale(ctx, ggml_mul_mat(ctx, b_ref[size_t(slot_of(r))], ax_row), t.scale);
      want[size_t(r)] = ggml_add(ctx, want[size_t(r)], term);
    }
  }
  ggml_tensor* got = lora_add(ctx, y, x, routes, groups);
  for (ggml_tensor* w : want) ggml_build_forward_expand(graph, w);
  ggml_build_forward_expand(graph, got);
  EXPECT_EQ(ggml_graph_compute_with_ctx(ctx, graph, n_threads), GGML_STATUS_SUCCESS);
  std::vector<float> w,
      g(static_cast<const float*>(got->data), static_cast<const float*>(got->data) + kOut * n_rows);
  for (ggml_tensor* t : want)
    w.insert(w.end(), static_cast<const float*>(t->data), static_cast<const float*>(t->data) + kOut);
  ggml_free(ctx);
  return {w, g};
}

void expect_bitwise_equal(const std::vector<float>& want, const std::vector<float>& got,
                          const std::string& what) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << what << " output " << i;
    ASSERT_EQ(std::memcmp(&want[i], &got[i], sizeof(float)), 0)
        << what << " output " << i << ": ggml " << want[i] << ", lora_add " << got[i];
  }
}

TEST(LoraAdd, EachTypeRoundsAsGgmlMulMatIdMulMatScaleAdd) {
  for (ggml_type type : {GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_F32}) {
    // Short ranks, and ranks past ggml's SIMD steps (32 with AVX2, 64 with
    // AVX-512), where its dot products split into vector accumulators.
    for (int rank : {1, 3, 4, 6, 8, 16, 23, 32, 63, 64, 80, 128, 191}) {
      const std::string what = std::string(ggml_type_name(type)) + " rank " + std::to_string(rank);
      const auto [want, got] = both_ways({{type, rank, rank, 0.75f}}, unsigned(rank), 3, 2);
      expect_bitwise_equal(want, got, what);
      // Padded to a larger rank, as when a larger adapter shares the stack:
      // a little, and past the next SIMD step (ggml sums the adapter's own
      // rank, not the stack's).
      for (const int padded : {std::max(24, rank + 8), rank + 72}) {
        const auto [want_padded, got_padded] = both_ways({{type, rank, padded, 0.75f}}, unsigned(rank), 3, 2);
        expect_bitwise_equal(want_padded, got_padded, what + " padded to " + std::to_string(padded));
      }
    }
  }
}

// The tests above pass on any CPU, since a kernel that would round otherwise
// than ggml steps aside for ggml's dot product. Where lora_ops is built for
// AVX-512 (as ggml is, both -march=native), the fast ones must be the ones
// that run.
TEST(LoraAdd, TheFastKernelsRunOnAvx512Builds) {
  const LoraKernels k = lora_kernels();
  if (k.avx512) {
    EXPECT_EQ(k.f16_in_order_below, 64);
    EXPECT_EQ(k.bf16_in_order_below, 64);
    EXPECT_TRUE(k.f16_simd_order);
    EXPECT_EQ(k.f32_tail_width, 8);
    EXPECT_EQ(k.f32_in_order_below, 64);
    EXPECT_TRUE(k.f32_simd_order);
  } else {
    EXPECT_FALSE(k.f16_simd_order);
    EXPECT_FALSE(k.f32_simd_order);
    EXPECT_GE(k.f16_in_order_below, 32)
        << "ggml's F16 dot product sums rows below 32 in order on every x86 build";
  }
}

TEST(LoraAdd, AStackOfDifferentTypesAddsEachTermInTurn) {
  const auto [want, got] = both_ways(
      {{GGML_TYPE_F32, 6, 8, 0.5f}, {GGML_TYPE_BF16, 16, 16, 1.25f}, {GGML_TYPE_F16, 8, 16, 2.0f}}, 7, 2, 2);
  expect_bitwise_equal(want, got, "f32 + bf16 + f16");
}

// However the rows fall to the threads: whole rows, rows in slices of their
// outputs, or some of each.
TEST(LoraAdd, AnyRowsOnAnyThreads) {
  for (int threads : {1, 2, 3}) {
    for (int64_t rows : {1, 2, 3, 5, 8}) {
      const std::string what = std::to_string(rows) + " rows on " + std::to_string(threads) + " threads";
      const auto [want, got] = both_ways({{GGML_TYPE_F16, 16, 16, 2.0f}, {GGML_TYPE_F32, 4, 4, 0.5f}},
                                         unsigned(rows), rows, threads);
      expect_bitwise_equal(want, got, what);
    }
  }
}

}  // namespace
}  // namespace graft

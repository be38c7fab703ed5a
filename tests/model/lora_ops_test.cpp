// lora_b_add against ggml's own ops, bit for bit: for a row (as in decoding),
// each term must be what ggml_mul_mat(B, A x), ggml_scale and ggml_add give
// for a B of that type (how llama.cpp applies an adapter), for F16, BF16 and
// F32 adapters, at the ranks ggml sums in order, and for stacks that mix
// types in one row.
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

constexpr int64_t kOut = 72;  // not a multiple of the kernel's chunk of 32 outputs

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

// y + the terms in order, one row: by ggml's ops (B [rank, n_out] as llama.cpp
// holds it) and by lora_b_add (B stacked transposed, padded to stack_rank, in
// slot 1 of 2). Each term's type must differ from the others'.
std::pair<std::vector<float>, std::vector<float>> both_ways(const std::vector<Term>& terms, unsigned seed) {
  ggml_init_params params{};
  params.mem_size = size_t(4) << 20;
  ggml_context* ctx = ggml_init(params);
  ggml_cgraph* graph = ggml_new_graph(ctx);

  ggml_tensor* y = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, kOut, 1);
  store(y, random_values(kOut, seed, 1.0f));
  ggml_tensor* routes = ggml_new_tensor_3d(ctx, GGML_TYPE_I32, int64_t(terms.size()), 1, 1 + kLoraTypeCount);
  ggml_tensor* scales = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 1, int64_t(terms.size()), 1);
  std::memset(routes->data, 0, ggml_nbytes(routes));
  std::vector<LoraProducts> groups;
  ggml_tensor* want = y;
  for (size_t u = 0; u < terms.size(); ++u) {
    const Term& t = terms[u];
    const std::vector<float> b = random_values(size_t(kOut * t.rank), seed + 10 + unsigned(u), 0.5f);
    std::vector<float> ax = random_values(size_t(t.rank), seed + 20 + unsigned(u), 1.0f);
    // ggml's way: B [rank, n_out], A x [rank, 1].
    ggml_tensor* b_ref = ggml_new_tensor_2d(ctx, t.type, t.rank, kOut);
    store(b_ref, b);
    ggml_tensor* ax_ref = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, t.rank, 1);
    store(ax_ref, ax);
    want = ggml_add(ctx, want, ggml_scale(ctx, ggml_mul_mat(ctx, b_ref, ax_ref), t.scale));
    // The stacked way: slot 1 of [n_out, stack_rank, 2], zero-padded.
    ggml_tensor* stack = ggml_new_tensor_3d(ctx, t.type, kOut, t.stack_rank, 2);
    std::vector<float> stacked(size_t(kOut * t.stack_rank * 2), 0.0f);
    for (int k = 0; k < t.rank; ++k) {
      for (int64_t o = 0; o < kOut; ++o) {
        stacked[size_t((kOut * t.stack_rank) + k * kOut + o)] = b[size_t(o * t.rank + k)];
      }
    }
    store(stack, stacked);
    ax.resize(size_t(t.stack_rank), 0.0f);
    ggml_tensor* ax_stacked = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, t.stack_rank, int64_t(terms.size()), 1);
    std::memset(ax_stacked->data, 0, ggml_nbytes(ax_stacked));
    std::memcpy(static_cast<float*>(ax_stacked->data) + u * size_t(t.stack_rank), ax.data(),
                ax.size() * sizeof(float));
    const int type = type_index(t.type);
    static_cast<int32_t*>(routes->data)[u] = type;
    static_cast<int32_t*>(routes->data)[size_t(1 + type) * terms.size() + u] = 1;
    static_cast<float*>(scales->data)[u] = t.scale;
    groups.push_back({stack, ax_stacked});
  }
  ggml_tensor* got = lora_b_add(ctx, y, routes, scales, groups);
  ggml_build_forward_expand(graph, want);
  ggml_build_forward_expand(graph, got);
  EXPECT_EQ(ggml_graph_compute_with_ctx(ctx, graph, 2), GGML_STATUS_SUCCESS);
  std::vector<float> w(static_cast<const float*>(want->data), static_cast<const float*>(want->data) + kOut);
  std::vector<float> g(static_cast<const float*>(got->data), static_cast<const float*>(got->data) + kOut);
  ggml_free(ctx);
  return {w, g};
}

void expect_bitwise_equal(const std::vector<float>& want, const std::vector<float>& got,
                          const std::string& what) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << what << " output " << i;
    ASSERT_EQ(std::memcmp(&want[i], &got[i], sizeof(float)), 0)
        << what << " output " << i << ": ggml " << want[i] << ", lora_b_add " << got[i];
  }
}

TEST(LoraBAdd, EachTypeRoundsAsGgmlMulMatScaleAdd) {
  for (ggml_type type : {GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_F32}) {
    // Short ranks, and ranks past ggml's SIMD steps (32 with AVX2, 64 with
    // AVX-512), where its dot products split into vector accumulators.
    for (int rank : {1, 3, 4, 6, 8, 16, 23, 32, 64, 80, 128}) {
      const std::string what = std::string(ggml_type_name(type)) + " rank " + std::to_string(rank);
      const auto [want, got] = both_ways({{type, rank, rank, 0.75f}}, unsigned(rank));
      expect_bitwise_equal(want, got, what);
      // Padded to a larger rank, as when a larger adapter shares the stack.
      const int padded = std::max(24, rank + 8);
      const auto [want_padded, got_padded] = both_ways({{type, rank, padded, 0.75f}}, unsigned(rank));
      expect_bitwise_equal(want_padded, got_padded, what + " padded to " + std::to_string(padded));
    }
  }
}

TEST(LoraBAdd, AStackOfDifferentTypesAddsEachTermInTurn) {
  const auto [want, got] = both_ways(
      {{GGML_TYPE_F32, 6, 8, 0.5f}, {GGML_TYPE_BF16, 16, 16, 1.25f}, {GGML_TYPE_F16, 8, 16, 2.0f}}, 7);
  expect_bitwise_equal(want, got, "f32 + bf16 + f16");
}

}  // namespace
}  // namespace graft

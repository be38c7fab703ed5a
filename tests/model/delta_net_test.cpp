// delta_net_update against ggml_gated_delta_net, bit for bit: the outputs and
// the new states, for decode steps and prompts, several sequences in slots
// out of order, fewer key heads than value heads, head widths of the test
// models (16) and of Qwen3.5 (128).
#include "model/delta_net.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <ggml-cpu.h>
#include <gtest/gtest.h>

namespace graft {
namespace {

void fill(ggml_tensor* t, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> uniform(lo, hi);
  auto* p = static_cast<float*>(t->data);
  for (int64_t i = 0; i < ggml_nelements(t); ++i) p[i] = uniform(rng);
}

void check(int64_t hd, int64_t n_k_heads, int64_t n_v_heads, int64_t n_tokens, std::vector<int32_t> slots) {
  const std::string what = "head_dim " + std::to_string(hd) + ", " + std::to_string(n_tokens) + " tokens x " +
                           std::to_string(slots.size()) + " sequences";
  if (!delta_net_update_supported(hd)) GTEST_SKIP() << "not built for this CPU: " << what;
  const int64_t n_seqs = int64_t(slots.size()), n_slots = 5;
  const int64_t state_size = hd * hd * n_v_heads;
  ggml_init_params params{};
  params.mem_size = size_t(64) << 20;
  ggml_context* ctx = ggml_init(params);
  std::mt19937 rng(unsigned(hd * 1000 + n_tokens));

  ggml_tensor* q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hd, n_k_heads, n_tokens, n_seqs);
  ggml_tensor* k = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hd, n_k_heads, n_tokens, n_seqs);
  ggml_tensor* v = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hd, n_v_heads, n_tokens, n_seqs);
  ggml_tensor* g = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 1, n_v_heads, n_tokens, n_seqs);
  ggml_tensor* beta = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 1, n_v_heads, n_tokens, n_seqs);
  ggml_tensor* states = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, state_size, n_slots);
  ggml_tensor* slot_ids = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n_seqs);
  fill(q, rng, -0.3f, 0.3f);
  fill(k, rng, -0.3f, 0.3f);
  fill(v, rng, -1.0f, 1.0f);
  fill(g, rng, -2.0f, 0.0f);
  fill(beta, rng, 0.0f, 1.0f);
  fill(states, rng, -0.5f, 0.5f);
  std::memcpy(slot_ids->data, slots.data(), slots.size() * sizeof(int32_t));
  const std::vector<float> before(static_cast<const float*>(states->data),
                                  static_cast<const float*>(states->data) + ggml_nelements(states));

  // ggml's way: gather the states, run the op (outputs, then new states).
  ggml_tensor* s0 = ggml_reshape_4d(ctx, ggml_get_rows(ctx, states, slot_ids), hd, hd, n_v_heads, n_seqs);
  ggml_tensor* want = ggml_gated_delta_net(ctx, q, k, v, g, beta, s0, 1);
  ggml_cgraph* graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, want);
  ASSERT_EQ(ggml_graph_compute_with_ctx(ctx, graph, 2), GGML_STATUS_SUCCESS);
  // In place.
  ggml_tensor* got = delta_net_update(ctx, q, k, v, g, beta, states, slot_ids);
  graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, got);
  ASSERT_EQ(ggml_graph_compute_with_ctx(ctx, graph, 3), GGML_STATUS_SUCCESS);

  const int64_t n_out = hd * n_v_heads * n_tokens * n_seqs;
  const auto* w = static_cast<const float*>(want->data);
  const auto* o = static_cast<const float*>(got->data);
  for (int64_t i = 0; i < n_out; ++i) {
    ASSERT_FALSE(std::isnan(o[i])) << what << ": output " << i;
    ASSERT_EQ(std::memcmp(&w[i], &o[i], sizeof(float)), 0)
        << what << ": output " << i << ": ggml " << w[i] << ", delta_net_update " << o[i];
  }
  const auto* s = static_cast<const float*>(states->data);
  for (int64_t slot = 0; slot < n_slots; ++slot) {
    int64_t seq = -1;
    for (int64_t i = 0; i < n_seqs; ++i) {
      if (slots[size_t(i)] == slot) seq = i;
    }
    for (int64_t e = 0; e < state_size; ++e) {
      const float now = s[slot * state_size + e];
      const float expected =
          seq < 0 ? before[size_t(slot * state_size + e)] : w[n_out + seq * state_size + e];
      ASSERT_EQ(std::memcmp(&now, &expected, sizeof(float)), 0)
          << what << ": slot " << slot << " state " << e << ": want " << expected << ", got " << now;
    }
  }
  ggml_free(ctx);
}

TEST(DeltaNetUpdate, DecodeStepsMatchGgml) {
  check(16, 2, 4, 1, {3});
  check(16, 2, 4, 1, {4, 0, 2});
  check(128, 2, 4, 1, {1, 3});
}

TEST(DeltaNetUpdate, PromptsMatchGgml) {
  check(16, 2, 4, 37, {2});
  check(16, 2, 4, 9, {0, 4});
  check(128, 1, 2, 20, {3, 1});
}

TEST(DeltaNetUpdate, LongPromptsMatchGgml) {
  check(128, 2, 4, 67, {1});  // the interleaved rows over many tokens and every row block
}

// conv_update against ggml's convolution of the gathered states joined to
// the inputs, and the new states set_rows writes back, bit for bit.
void check_conv(int64_t n_ch, int64_t taps, int64_t n_tokens, std::vector<int32_t> slots, int n_threads) {
  ASSERT_TRUE(conv_update_supported(taps));
  const std::string what = std::to_string(n_ch) + " channels, " + std::to_string(taps) + " taps, " +
                           std::to_string(n_tokens) + " tokens x " + std::to_string(slots.size()) +
                           " sequences, " + std::to_string(n_threads) + " threads";
  const int64_t n_seqs = int64_t(slots.size()), n_slots = 5, hist = taps - 1;
  ggml_init_params params{};
  params.mem_size = size_t(64) << 20;
  ggml_context* ctx = ggml_init(params);
  std::mt19937 rng(unsigned(n_ch * 100 + n_tokens));
  // The inputs as a projection leaves them: rows of a wider matrix.
  ggml_tensor* rows = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_ch, n_tokens * n_seqs + 3);
  ggml_tensor* weights = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, taps, n_ch);
  ggml_tensor* states = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, hist * n_ch, n_slots);
  ggml_tensor* slot_ids = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n_seqs);
  fill(rows, rng, -2.0f, 2.0f);
  fill(weights, rng, -1.0f, 1.0f);
  fill(states, rng, -2.0f, 2.0f);
  std::memcpy(slot_ids->data, slots.data(), slots.size() * sizeof(int32_t));
  ggml_tensor* x = ggml_view_3d(ctx, rows, n_ch, n_tokens, n_seqs, rows->nb[1],
                                rows->nb[1] * size_t(n_tokens), rows->nb[1] * 2);

  ggml_tensor* s0 = ggml_reshape_3d(ctx, ggml_get_rows(ctx, states, slot_ids), hist, n_ch, n_seqs);
  ggml_tensor* in = ggml_concat(ctx, s0, ggml_transpose(ctx, x), 0);
  ggml_tensor* want = ggml_ssm_conv(ctx, in, weights);
  ggml_tensor* next = ggml_cont(ctx, ggml_view_3d(ctx, in, hist, n_ch, n_seqs, in->nb[1], in->nb[2],
                                                  ggml_row_size(in->type, n_tokens)));
  ggml_cgraph* graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, want);
  ggml_build_forward_expand(graph, next);
  ASSERT_EQ(ggml_graph_compute_with_ctx(ctx, graph, 2), GGML_STATUS_SUCCESS);
  const std::vector<float> before(static_cast<const float*>(states->data),
                                  static_cast<const float*>(states->data) + ggml_nelements(states));

  ggml_tensor* got = conv_update(ctx, x, states, weights, slot_ids);
  graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, got);
  ASSERT_EQ(ggml_graph_compute_with_ctx(ctx, graph, n_threads), GGML_STATUS_SUCCESS);

  const auto* w = static_cast<const float*>(want->data);
  const auto* o = static_cast<const float*>(got->data);
  for (int64_t i = 0; i < n_ch * n_tokens * n_seqs; ++i) {
    ASSERT_EQ(std::memcmp(&w[i], &o[i], sizeof(float)), 0)
        << what << ": output " << i << ": ggml " << w[i] << ", conv_update " << o[i];
  }
  const auto* s = static_cast<const float*>(states->data);
  const auto* n = static_cast<const float*>(next->data);
  for (int64_t slot = 0; slot < n_slots; ++slot) {
    int64_t seq = -1;
    for (int64_t i = 0; i < n_seqs; ++i) {
      if (slots[size_t(i)] == slot) seq = i;
    }
    for (int64_t e = 0; e < hist * n_ch; ++e) {
      const float now = s[slot * hist * n_ch + e];
      const float expected = seq < 0 ? before[size_t(slot * hist * n_ch + e)] : n[seq * hist * n_ch + e];
      ASSERT_EQ(std::memcmp(&now, &expected, sizeof(float)), 0)
          << what << ": slot " << slot << " state " << e << ": want " << expected << ", got " << now;
    }
  }
  ggml_free(ctx);
}

TEST(ConvUpdate, MatchesGgml) {
  EXPECT_FALSE(conv_update_supported(3));
  check_conv(48, 4, 1, {3}, 2);          // a decode step
  check_conv(48, 4, 2, {4, 0}, 3);       // fewer tokens than the state holds
  check_conv(200, 4, 37, {2, 1, 4}, 3);  // a prompt, channels not whole blocks
  check_conv(64, 4, 9, {0}, 1);
  check_conv(8192, 4, 20, {1}, 2);
}

}  // namespace
}  // namespace graft

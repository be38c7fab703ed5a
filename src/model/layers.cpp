#include "model/layers.h"

#include <algorithm>
#include <array>
#include <span>
#include <vector>

#include "model/kv_attention.h"
#include "model/lora_ops.h"
#include "model/q4_rows.h"
#include "model/q4k_rows.h"
#include "model/q6k_rows.h"
#include "model/q8_rows.h"

namespace graft {

ggml_tensor* input_hidden(GraphContext& g, const Model& model) {
  return g.hidden_in ? g.hidden_in : ggml_get_rows(g.ctx, model.weights().tok_embd, g.tokens);
}

LayerRange layer_range(const GraphContext& g, const Model& model) {
  const int n_layer = model.config().n_layer;
  return {g.layer_begin, g.layer_end < 0 ? n_layer : g.layer_end};
}

ggml_tensor* finish_graph(GraphContext& g, const Model& model, ggml_tensor* x) {
  return g.hidden_out ? x : output_logits(g, model, x);
}

ggml_tensor* rms_norm(GraphContext& g, ggml_tensor* x, ggml_tensor* weight, float eps) {
  x = ggml_rms_norm(g.ctx, x, eps);
  return weight ? ggml_mul(g.ctx, x, weight) : x;
}

ggml_tensor* rope(GraphContext& g, ggml_tensor* x, const RopeConfig& r, ggml_tensor* freq_factors) {
  // No YaRN: ext_factor 0, attn_factor 1 (beta_fast/slow then play no part).
  return ggml_rope_ext(g.ctx, x, g.positions, freq_factors, r.n_rot, r.mode, r.n_ctx_orig, r.freq_base,
                       r.freq_scale, /*ext_factor=*/0.0f, /*attn_factor=*/1.0f, /*beta_fast=*/32.0f,
                       /*beta_slow=*/1.0f);
}

// Through q4_rows, q8_rows, q4k_rows (Q4_K, Q5_K) or q6k_rows when w suits
// one (the result is ggml's to the bit), through ggml otherwise (always in
// training graphs: they have no backward). Each input is quantized once for
// every product that reads it, in the form its kernel reads (q4_rows and
// q8_rows share one, Q5_K's and Q6_K's another).
ggml_tensor* mul_mat(GraphContext& g, ggml_tensor* w, ggml_tensor* x) {
  if (g.training || !ggml_is_contiguous(x)) return ggml_mul_mat(g.ctx, w, x);
  const bool q4k = q4k_rows_supported(w);  // Q4_K, Q5_K: q4k_rows, as q4_rows
  const bool q6k = q6k_rows_supported(w);
  if (q4k || q6k || q5k_rows_supported(w)) {
    auto& quantized = q4k ? g.quantized_k : g.quantized_k5;
    auto it = std::find_if(quantized.begin(), quantized.end(), [&](const auto& e) { return e.first == x; });
    if (it == quantized.end())
      it = quantized.insert(quantized.end(),
                            {x, q4k ? q4k_rows_quantize(g.ctx, x) : q5k_rows_quantize(g.ctx, x)});
    if (q4k) return q4k_rows_mul_mat(g.ctx, w, it->second);
    return q6k ? q6k_rows_mul_mat(g.ctx, w, it->second) : q5k_rows_mul_mat(g.ctx, w, it->second);
  }
  const bool q4 = q4_rows_supported(w);
  if (!(q4 || q8_rows_supported(w))) return ggml_mul_mat(g.ctx, w, x);
  auto it = std::find_if(g.quantized.begin(), g.quantized.end(), [&](const auto& e) { return e.first == x; });
  if (it == g.quantized.end()) it = g.quantized.insert(g.quantized.end(), {x, q4_rows_quantize(g.ctx, x)});
  return q4 ? q4_rows_mul_mat(g.ctx, w, it->second) : q8_rows_mul_mat(g.ctx, w, it->second);
}

namespace {

// y + scale_u * B_u (A_u x) for each of the row's adapters u, for x
// [n_in, n_rows] and y [n_out, n_rows], through the stacks of each adapter
// type the batch uses (lora_ops.h): the deltas into y one at a time, in the
// selection's order, as llama.cpp applies its adapters: summing them
// first rounds differently, and through q8_0 activations that can change a
// greedy token.
ggml_tensor* add_lora_deltas(GraphContext& g, const LoraSet& lora, int layer, LoraTarget target,
                             ggml_tensor* x, ggml_tensor* y) {
  ggml_context* ctx = g.ctx;
  const LoraInputs& in = *g.lora;
  // After select_output_rows only the output rows are left.
  const bool outputs_only = in.out_routes && x->ne[1] != g.n_rows;
  ggml_tensor* routes = outputs_only ? in.out_routes : in.routes;
  std::array<LoraSet::Stack, kLoraTypeCount> groups;
  size_t n_groups = 0;
  for (int t = 0; t < kLoraTypeCount; ++t) {
    const LoraSet::Stack stack = lora.stack(layer, target, LoraType(t));
    if (in.types[size_t(t)] && stack.a) groups[n_groups++] = stack;
  }
  if (n_groups == 0) return y;
  return lora_add(ctx, y, x, routes, std::span(groups.data(), n_groups));
}

// y + scale * B (A x) for the trainable pair of (layer, target), if any.
ggml_tensor* add_trainable_delta(GraphContext& g, ggml_tensor* x, ggml_tensor* y, int layer,
                                 LoraTarget target) {
  const TrainingInputs& t = *g.training;
  const TrainingInputs::Pair& pair = t.pair(layer, target);
  if (!pair.a) return y;
  if (t.dropout) x = t.dropout(g.ctx, x, layer, target);
  ggml_tensor* delta = ggml_mul_mat(g.ctx, pair.b, ggml_mul_mat(g.ctx, pair.a, x));
  return ggml_add(g.ctx, y, ggml_scale(g.ctx, delta, t.lora_scale));
}

// Attention for training graphs: each sequence's rows over its own keys and
// values, with plain products and a masked softmax (ggml differentiates
// these; it has no backward for flash attention). Sequences and heads share
// one axis, heads fastest, so grouped-query broadcasting maps query head
// s * n_head + h to key head s * n_head_kv + h / (n_head / n_head_kv).
ggml_tensor* training_attention(GraphContext& g, ggml_tensor* q, ggml_tensor* k, ggml_tensor* v, float scale,
                                bool sliding) {
  ggml_context* ctx = g.ctx;
  const TrainingInputs& t = *g.training;
  const int64_t head_dim = q->ne[0];
  const int64_t n_head = q->ne[1];
  const int64_t n_head_kv = k->ne[1];
  const int64_t len = t.seq_len;
  const int64_t n_seqs = t.n_seqs;
  // [head_dim, heads, len, seqs] -> [head_dim, len, heads * seqs]
  auto by_head = [&](ggml_tensor* x, int64_t heads) {
    x = ggml_reshape_4d(ctx, x, head_dim, heads, len, n_seqs);
    x = ggml_cont(ctx, ggml_permute(ctx, x, 0, 2, 1, 3));
    return ggml_reshape_3d(ctx, x, head_dim, len, heads * n_seqs);
  };
  ggml_tensor* kq = ggml_mul_mat(ctx, by_head(k, n_head_kv), by_head(q, n_head));  // [len_k, len_q, ...]
  kq = ggml_soft_max_ext(ctx, kq, sliding ? t.sliding_mask : t.causal_mask, scale, 0.0f);
  // v transposed per head: [len, head_dim, heads_kv * seqs]
  ggml_tensor* vt = ggml_reshape_4d(ctx, v, head_dim, n_head_kv, len, n_seqs);
  vt = ggml_cont(ctx, ggml_permute(ctx, vt, 1, 2, 0, 3));
  vt = ggml_reshape_3d(ctx, vt, len, head_dim, n_head_kv * n_seqs);
  ggml_tensor* out = ggml_mul_mat(ctx, vt, kq);  // [head_dim, len_q, heads * seqs]
  out = ggml_reshape_4d(ctx, out, head_dim, len, n_head, n_seqs);
  out = ggml_cont(ctx, ggml_permute(ctx, out, 0, 2, 1, 3));  // [head_dim, heads, len, seqs]
  return ggml_reshape_2d(ctx, out, head_dim * n_head, len * n_seqs);
}

}  // namespace

ggml_tensor* lora_linear(GraphContext& g, const Model& model, ggml_tensor* w, ggml_tensor* x, int layer,
                         LoraTarget target, ggml_tensor* bias) {
  ggml_tensor* y = mul_mat(g, w, x);
  if (g.training) y = add_trainable_delta(g, x, y, layer, target);
  if (g.lora) y = add_lora_deltas(g, model.lora(), layer, target, x, y);
  if (bias) y = ggml_add(g.ctx, y, bias);
  return y;
}

ggml_tensor* attention(GraphContext& g, int layer, ggml_tensor* q, ggml_tensor* k, ggml_tensor* v,
                       float scale, bool sliding, bool store) {
  if (g.training) return training_attention(g, q, k, v, scale, sliding);
  ggml_context* ctx = g.ctx;
  const AttentionInputs& a = g.attention;
  const AttentionInputs::Layer& cache = a.layers[size_t(layer)];
  const int64_t head_dim = k->ne[0];
  const int64_t n_head_kv = k->ne[1];
  const int64_t n_embd_kv = head_dim * n_head_kv;
  const int64_t n_rows = k->ne[2];

  // Store this batch's keys and values first (the graph runs in node order).
  ggml_build_forward_expand(g.graph, q);
  // Sliding-window layers with a pool of their own store and look there.
  const bool own_pool = sliding && a.local_store_rows;
  const std::vector<AttentionInputs::Group>& groups = own_pool ? a.local_groups : a.groups;
  if (store) {
    ggml_build_forward_expand(g.graph, v);
    ggml_build_forward_expand(g.graph, k);
    ggml_tensor* k_rows = ggml_view_2d(ctx, k, n_embd_kv, n_rows, k->nb[2], 0);
    ggml_tensor* v_rows = ggml_view_2d(ctx, v, n_embd_kv, n_rows, v->nb[2], 0);
    ggml_tensor* store_rows = own_pool ? a.local_store_rows : a.store_rows;
    // Each layer's cache is as wide as its keys (gemma4's sliding layers are narrower).
    GGML_ASSERT(cache.k->ne[0] == n_embd_kv && cache.v->ne[0] == n_embd_kv);
    ggml_build_forward_expand(g.graph, ggml_set_rows(ctx, cache.k, k_rows, store_rows));
    ggml_build_forward_expand(g.graph, ggml_set_rows(ctx, cache.v, v_rows, store_rows));
  }

  // Each group of rows over its own window of cells; the outputs are
  // [head_dim, n_head, rows] and join along the rows.
  std::vector<ggml_tensor*> outs;
  for (const AttentionInputs::Group& group : groups) {
    ggml_tensor* q_rows = groups.size() == 1
                              ? q
                              : ggml_view_3d(ctx, q, q->ne[0], q->ne[1], group.n_rows, q->nb[1], q->nb[2],
                                             size_t(group.row_begin) * q->nb[2]);
    ggml_tensor* keys =
        ggml_view_3d(ctx, cache.k, head_dim, n_head_kv, group.n_cells, ggml_row_size(cache.k->type, head_dim),
                     cache.k->nb[1], size_t(group.cell_begin) * cache.k->nb[1]);
    ggml_tensor* values =
        ggml_view_3d(ctx, cache.v, head_dim, n_head_kv, group.n_cells, ggml_row_size(cache.v->type, head_dim),
                     cache.v->nb[1], size_t(group.cell_begin) * cache.v->nb[1]);
    ggml_tensor* mask = sliding && !own_pool ? group.sliding_mask : group.mask;
    if (kv_attention_supported(keys, values, group.n_rows)) {  // ggml's result, faster
      outs.push_back(kv_attention(ctx, q_rows, keys, values, mask, scale));
      continue;
    }
    q_rows = ggml_permute(ctx, q_rows, 0, 2, 1, 3);
    keys = ggml_permute(ctx, keys, 0, 2, 1, 3);
    values = ggml_permute(ctx, values, 0, 2, 1, 3);
    ggml_tensor* group_out = ggml_flash_attn_ext(ctx, q_rows, keys, values, mask, scale, 0.0f, 0.0f);
    ggml_flash_attn_ext_set_prec(group_out, GGML_PREC_F32);
    outs.push_back(group_out);
  }
  // Joined pairwise, so each row is copied log2(groups) times rather than up
  // to groups times along a chain.
  while (outs.size() > 1) {
    std::vector<ggml_tensor*> joined;
    for (size_t i = 0; i + 1 < outs.size(); i += 2)
      joined.push_back(ggml_concat(ctx, outs[i], outs[i + 1], 2));
    if (outs.size() % 2 == 1) joined.push_back(outs.back());
    outs = std::move(joined);
  }
  ggml_tensor* out = outs[0];
  return ggml_reshape_2d(ctx, out, out->ne[0] * out->ne[1], out->ne[2] * out->ne[3]);
}

ggml_tensor* swiglu_ffn(GraphContext& g, const Model& model, const LayerWeights& w, ggml_tensor* x,
                        int layer) {
  ggml_tensor* up = lora_linear(g, model, w.ffn_up, x, layer, LoraTarget::ffn_up);
  ggml_tensor* gate = lora_linear(g, model, w.ffn_gate, x, layer, LoraTarget::ffn_gate);
  ggml_tensor* h = ggml_swiglu_split(g.ctx, gate, up);
  return lora_linear(g, model, w.ffn_down, h, layer, LoraTarget::ffn_down);
}

ggml_tensor* geglu_ffn(GraphContext& g, const Model& model, const LayerWeights& w, ggml_tensor* x,
                       int layer) {
  ggml_tensor* up = lora_linear(g, model, w.ffn_up, x, layer, LoraTarget::ffn_up);
  ggml_tensor* gate = lora_linear(g, model, w.ffn_gate, x, layer, LoraTarget::ffn_gate);
  ggml_tensor* h = ggml_geglu_split(g.ctx, gate, up);
  return lora_linear(g, model, w.ffn_down, h, layer, LoraTarget::ffn_down);
}

ggml_tensor* select_output_rows(GraphContext& g, ggml_tensor* x) {
  return g.out_rows ? ggml_get_rows(g.ctx, x, g.out_rows) : x;
}

ggml_tensor* output_logits(GraphContext& g, const Model& model, ggml_tensor* x) {
  const ModelWeights& w = model.weights();
  const ModelConfig& c = model.config();
  x = rms_norm(g, x, w.output_norm, c.rms_eps);
  ggml_tensor* logits = mul_mat(g, w.output, x);
  if (c.logit_scale != 1.0f) logits = ggml_scale(g.ctx, logits, c.logit_scale);
  if (c.logit_softcap > 0.0f) {
    logits = ggml_scale(g.ctx, logits, 1.0f / c.logit_softcap);
    logits = ggml_scale(g.ctx, ggml_tanh(g.ctx, logits), c.logit_softcap);
  }
  return logits;
}

}  // namespace graft

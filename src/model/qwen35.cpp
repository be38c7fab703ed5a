// Qwen3.5 (qwen35): a hybrid of gated delta-net (linear attention) layers and
// gated full-attention layers, three of the first to one of the second in
// Qwen3.5's own models.
//
// Every block: x += mixer(norm(x)); x += mlp(post_attention_norm(x)).
// - Full attention: the q projection yields q and a gate per head; q and k
//   are RMS-normed per head and rotated over their first n_rot dimensions;
//   the attention output is multiplied by sigmoid(gate).
// - Gated delta net: one projection yields the channels q, k, v of a causal
//   convolution (conv_kernel taps, whose last inputs are the sequence's conv
//   state), then silu; q and k are L2-normed per head. Per value head, the
//   state S (head_dim x head_dim) decays by exp(g) and learns v at key k with
//   strength beta (the delta rule), and the output reads S at q:
//     g = softplus(alpha x + dt_bias) * a,  beta = sigmoid(beta x)
//   The output is RMS-normed per head, multiplied by silu(z) (z: the gate
//   projection), then projected back.
#include <cmath>

#include <gguf.h>

#include "model/arch.h"
#include "model/delta_net.h"
#include "model/layers.h"
#include "model/weights_loader.h"

namespace graft {

namespace {

// The rows a flag or an integer array gives per layer (recurrent_layers).
Result<std::vector<bool>> read_layer_flags(const GgufFile& f, const std::string& key, int n_layer) {
  gguf_context* ctx = f.raw();
  const int64_t id = gguf_find_key(ctx, key.c_str());
  if (gguf_get_kv_type(ctx, id) != GGUF_TYPE_ARRAY || int64_t(gguf_get_arr_n(ctx, id)) < n_layer) {
    return errorf("invalid_model", "{}: '{}' is not an array of {} layer flags", f.path(), key, n_layer);
  }
  std::vector<bool> flags(static_cast<size_t>(n_layer), false);
  const gguf_type type = gguf_get_arr_type(ctx, id);
  const auto* data = static_cast<const uint8_t*>(gguf_get_arr_data(ctx, id));
  for (int i = 0; i < n_layer; ++i) {
    if (type == GGUF_TYPE_BOOL || type == GGUF_TYPE_INT8 || type == GGUF_TYPE_UINT8) {
      flags[size_t(i)] = data[i] != 0;
    } else if (type == GGUF_TYPE_INT32 || type == GGUF_TYPE_UINT32) {
      flags[size_t(i)] = reinterpret_cast<const int32_t*>(data)[i] != 0;
    } else {
      return errorf("invalid_model", "{}: '{}' holds {} values, expected flags", f.path(), key,
                    gguf_type_name(type));
    }
  }
  return flags;
}

Result<int> positive(const GgufFile& f, const std::string& key) {
  auto v = f.get_int(key);
  if (!v || *v <= 0 || *v > (int64_t(1) << 24))
    return errorf("invalid_model", "{}: missing or bad metadata key '{}'", f.path(), key);
  return int(*v);
}

}  // namespace

Status read_qwen35_config(const GgufFile& f, ModelConfig& c) {
  const std::string a = c.arch + ".";
  // Multi-token-prediction blocks follow the trunk's; generation does not run them.
  const int n_nextn = int(f.find_int(a + "nextn_predict_layers").value_or(0));
  if (n_nextn < 0 || n_nextn >= c.n_layer) {
    return errorf("invalid_model", "{}: bad value {} for '{}nextn_predict_layers'", f.path(), n_nextn, a);
  }
  const int n_layer_all = c.n_layer;
  c.n_layer -= n_nextn;

  SsmConfig& s = c.ssm;
  GRAFT_TRY(s.conv_kernel, positive(f, a + "ssm.conv_kernel"));
  GRAFT_TRY(s.head_dim, positive(f, a + "ssm.state_size"));
  GRAFT_TRY(s.n_k_heads, positive(f, a + "ssm.group_count"));
  GRAFT_TRY(s.n_v_heads, positive(f, a + "ssm.time_step_rank"));
  GRAFT_TRY(s.inner, positive(f, a + "ssm.inner_size"));
  if (s.conv_kernel < 2) {
    return errorf("invalid_model", "{}: a convolution of {} taps keeps no state", f.path(), s.conv_kernel);
  }
  if (int64_t(s.inner) != int64_t(s.n_v_heads) * s.head_dim) {
    return errorf("invalid_model", "{}: ssm.inner_size {} is not time_step_rank {} x state_size {}", f.path(),
                  s.inner, s.n_v_heads, s.head_dim);
  }
  if (s.n_v_heads % s.n_k_heads != 0) {
    return errorf("invalid_model", "{}: {} value heads are not a multiple of {} key heads", f.path(),
                  s.n_v_heads, s.n_k_heads);
  }

  if (f.has(a + "attention.recurrent_layers")) {
    GRAFT_TRY(std::vector<bool> flags, read_layer_flags(f, a + "attention.recurrent_layers", n_layer_all));
    flags.resize(size_t(c.n_layer));
    c.recurrent = std::move(flags);
  } else {
    const int interval = int(f.find_int(a + "full_attention_interval").value_or(4));
    if (interval <= 0)
      return errorf("invalid_model", "{}: bad full_attention_interval {}", f.path(), interval);
    c.recurrent.assign(size_t(c.n_layer), false);
    for (int il = 0; il < c.n_layer; ++il) c.recurrent[size_t(il)] = (il + 1) % interval != 0;
  }
  if (f.find_float(a + "attention.scale").value_or(0.0) != 0.0) {
    return errorf("unsupported_model", "{}: a custom attention scale is not supported", f.path());
  }

  // Interleaved multi-axis rope over the first n_rot dimensions. For text all
  // three position axes are the token's position, which makes it neox rope
  // over those dimensions as long as every rotated pair reads one of them
  // (a pair past the three sections would read the fourth axis, 0).
  const RopeConfig& r = c.rope;
  if (r.n_rot <= 0 || r.n_rot > c.head_dim || r.n_rot % 2 != 0) {
    return errorf("invalid_model", "{}: rope over {} of {} dimensions", f.path(), r.n_rot, c.head_dim);
  }
  if (!r.scaling.empty()) {
    return errorf("unsupported_model", "{}: rope scaling '{}' is not supported for qwen35", f.path(),
                  r.scaling);
  }
  GRAFT_TRY(std::vector<int64_t> sections, f.get_int_array(a + "rope.dimension_sections"));
  sections.resize(4, 0);
  const int64_t n_sect = sections[0] + sections[1] + sections[2] + sections[3];
  for (int pair = 0; pair < r.n_rot / 2; ++pair) {
    const int64_t sector = n_sect > 0 ? pair % n_sect : -1;
    const bool text_axis = sector >= 0 && ((sector % 3 == 0 && sector < 3 * sections[0]) ||
                                           (sector % 3 == 1 && sector < 3 * sections[1]) ||
                                           (sector % 3 == 2 && sector < 3 * sections[2]));
    if (!text_axis) {
      return errorf("unsupported_model",
                    "{}: rope sections [{}, {}, {}, {}] leave rotated pair {} to the fourth axis", f.path(),
                    sections[0], sections[1], sections[2], sections[3], pair);
    }
  }
  c.rope.mode = GGML_ROPE_TYPE_NEOX;
  c.attn_gate = true;
  c.qk_norm = true;
  return {};
}

Status load_qwen35_layer(WeightsLoader& loader, const ModelConfig& c, int il, LayerWeights& l) {
  const std::string p = "blk." + std::to_string(il) + ".";
  const int64_t n_embd = c.n_embd, n_ff = c.n_ff;
  GRAFT_TRY(l.attn_norm, loader.vector(p + "attn_norm.weight", n_embd));
  GRAFT_TRY(l.ffn_norm, loader.vector(p + "post_attention_norm.weight", n_embd));
  if (c.is_recurrent(il)) {
    const SsmConfig& s = c.ssm;
    GRAFT_TRY(l.ssm_qkv, loader.matrix(p + "attn_qkv.weight", {n_embd, s.conv_dim()}));
    GRAFT_TRY(l.ssm_gate, loader.matrix(p + "attn_gate.weight", {n_embd, s.value_dim()}));
    GRAFT_TRY(l.ssm_conv, loader.f32_matrix(p + "ssm_conv1d.weight", {s.conv_kernel, s.conv_dim()}));
    GRAFT_TRY(l.ssm_dt, loader.vector(p + "ssm_dt.bias", s.n_v_heads));
    GRAFT_TRY(l.ssm_a, loader.vector(p + "ssm_a", s.n_v_heads));
    GRAFT_TRY(l.ssm_alpha, loader.matrix(p + "ssm_alpha.weight", {n_embd, s.n_v_heads}));
    GRAFT_TRY(l.ssm_beta, loader.matrix(p + "ssm_beta.weight", {n_embd, s.n_v_heads}));
    GRAFT_TRY(l.ssm_norm, loader.vector(p + "ssm_norm.weight", s.head_dim));
    GRAFT_TRY(l.ssm_out, loader.matrix(p + "ssm_out.weight", {s.value_dim(), n_embd}));
  } else {
    GRAFT_TRY(l.wq, loader.matrix(p + "attn_q.weight", {n_embd, c.n_embd_q_proj()}));
    GRAFT_TRY(l.wk, loader.matrix(p + "attn_k.weight", {n_embd, c.n_embd_kv()}));
    GRAFT_TRY(l.wv, loader.matrix(p + "attn_v.weight", {n_embd, c.n_embd_kv()}));
    GRAFT_TRY(l.wo, loader.matrix(p + "attn_output.weight", {c.n_embd_q(), n_embd}));
    GRAFT_TRY(l.q_norm, loader.vector(p + "attn_q_norm.weight", c.head_dim));
    GRAFT_TRY(l.k_norm, loader.vector(p + "attn_k_norm.weight", c.head_dim));
  }
  GRAFT_TRY(l.ffn_gate, loader.matrix(p + "ffn_gate.weight", {n_embd, n_ff}));
  GRAFT_TRY(l.ffn_up, loader.matrix(p + "ffn_up.weight", {n_embd, n_ff}));
  GRAFT_TRY(l.ffn_down, loader.matrix(p + "ffn_down.weight", {n_ff, n_embd}));
  return {};
}

namespace {

// Gated full attention over the KV cache: [n_embd, n_rows] -> [n_embd, n_rows].
ggml_tensor* gated_attention(GraphContext& g, const Model& model, const LayerWeights& l, ggml_tensor* x,
                             int il) {
  const ModelConfig& c = model.config();
  ggml_context* ctx = g.ctx;
  const int64_t hd = c.head_dim;
  // Per head: head_dim q values, then head_dim gate values.
  ggml_tensor* qg = lora_linear(g, model, l.wq, x, il, LoraTarget::attn_q);
  const size_t head_bytes = ggml_row_size(qg->type, 2 * hd);
  ggml_tensor* q = ggml_view_3d(ctx, qg, hd, c.n_head, g.n_rows, head_bytes, qg->nb[1], 0);
  ggml_tensor* gate =
      ggml_view_3d(ctx, qg, hd, c.n_head, g.n_rows, head_bytes, qg->nb[1], ggml_row_size(qg->type, hd));
  gate = ggml_cont_2d(ctx, gate, hd * c.n_head, g.n_rows);
  q = rms_norm(g, q, l.q_norm, c.rms_eps);

  ggml_tensor* k = lora_linear(g, model, l.wk, x, il, LoraTarget::attn_k);
  ggml_tensor* v = lora_linear(g, model, l.wv, x, il, LoraTarget::attn_v);
  k = rms_norm(g, ggml_reshape_3d(ctx, k, hd, c.n_head_kv, g.n_rows), l.k_norm, c.rms_eps);
  v = ggml_reshape_3d(ctx, v, hd, c.n_head_kv, g.n_rows);
  q = rope(g, q, c.rope, nullptr);
  k = rope(g, k, c.rope, nullptr);

  ggml_tensor* h = attention(g, il, q, k, v, 1.0f / std::sqrt(float(hd)));
  h = ggml_mul(ctx, h, ggml_sigmoid(ctx, gate));
  return lora_linear(g, model, l.wo, h, il, LoraTarget::attn_output);
}

// The rows [row_begin, row_begin + n_seqs * n_tokens) of x [n, n_rows] as [n, n_tokens, n_seqs].
ggml_tensor* group_rows(ggml_context* ctx, ggml_tensor* x, const RecurrentInputs::Group& grp) {
  return ggml_view_3d(ctx, x, x->ne[0], grp.n_tokens, grp.n_seqs, x->nb[1], x->nb[1] * grp.n_tokens,
                      x->nb[1] * size_t(grp.row_begin));
}

// The gated delta net of one group of rows. qkv: [conv_dim, n_rows]; gate
// (the decay's log) and beta: [n_v_heads, n_rows]. Reads and updates the
// group's state slots; returns [head_dim, n_v_heads, n_tokens * n_seqs].
ggml_tensor* delta_net_group(GraphContext& g, const ModelConfig& c, const LayerWeights& l,
                             const RecurrentInputs::Layer& state, const RecurrentInputs::Group& grp,
                             ggml_tensor* qkv, ggml_tensor* gate, ggml_tensor* beta) {
  ggml_context* ctx = g.ctx;
  const SsmConfig& s = c.ssm;
  const int64_t n_t = grp.n_tokens, n_s = grp.n_seqs;
  const int64_t taps = s.conv_kernel - 1;

  // The convolution reads the last taps inputs before the group, then its own.
  ggml_tensor* conv = nullptr;  // [conv_dim, n_t, n_s]
  if (!g.training && conv_update_supported(s.conv_kernel)) {
    // The states advance where they lie; the same numbers as the ops below.
    conv = conv_update(ctx, group_rows(ctx, qkv, grp), state.conv, l.ssm_conv, grp.slots);
  } else {
    ggml_tensor* conv_state = ggml_get_rows(ctx, state.conv, grp.slots);  // [taps * conv_dim, n_s]
    conv_state = ggml_reshape_3d(ctx, conv_state, taps, s.conv_dim(), n_s);
    ggml_tensor* conv_in = ggml_concat(ctx, conv_state, ggml_transpose(ctx, group_rows(ctx, qkv, grp)), 0);
    // [taps + n_t, conv_dim, n_s]: the last taps columns are the new conv state.
    ggml_tensor* conv_next = ggml_view_3d(ctx, conv_in, taps, s.conv_dim(), n_s, conv_in->nb[1],
                                          conv_in->nb[2], ggml_row_size(conv_in->type, n_t));
    conv_next = ggml_reshape_2d(ctx, ggml_cont(ctx, conv_next), taps * s.conv_dim(), n_s);
    ggml_build_forward_expand(g.graph, ggml_set_rows(ctx, state.conv, conv_next, grp.slots));
    conv = ggml_ssm_conv(ctx, conv_in, l.ssm_conv);
  }
  ggml_tensor* mixed = ggml_silu(ctx, conv);  // [conv_dim, n_t, n_s]
  const size_t f = ggml_element_size(mixed);
  const int64_t hd = s.head_dim;
  ggml_tensor* q = ggml_view_4d(ctx, mixed, hd, s.n_k_heads, n_t, n_s, hd * f, mixed->nb[1], mixed->nb[2], 0);
  ggml_tensor* k = ggml_view_4d(ctx, mixed, hd, s.n_k_heads, n_t, n_s, hd * f, mixed->nb[1], mixed->nb[2],
                                size_t(s.key_dim()) * f);
  ggml_tensor* v = ggml_view_4d(ctx, mixed, hd, s.n_v_heads, n_t, n_s, hd * f, mixed->nb[1], mixed->nb[2],
                                size_t(2 * s.key_dim()) * f);
  q = ggml_l2_norm(ctx, q, c.rms_eps);
  k = ggml_l2_norm(ctx, k, c.rms_eps);

  ggml_tensor* g_grp = ggml_reshape_4d(ctx, group_rows(ctx, gate, grp), 1, s.n_v_heads, n_t, n_s);
  ggml_tensor* b_grp = ggml_reshape_4d(ctx, group_rows(ctx, beta, grp), 1, s.n_v_heads, n_t, n_s);
  if (!g.training && delta_net_update_supported(hd)) {
    // The states advance where they lie; the same numbers as the op below.
    ggml_tensor* out = delta_net_update(ctx, q, k, v, g_grp, b_grp, state.delta, grp.slots);
    return ggml_reshape_3d(ctx, out, hd, s.n_v_heads, n_t * n_s);
  }
  ggml_tensor* delta = ggml_get_rows(ctx, state.delta, grp.slots);  // [delta_state_size, n_s]
  delta = ggml_reshape_4d(ctx, delta, hd, hd, s.n_v_heads, n_s);

  // One result: the outputs [hd, n_v_heads, n_t, n_s], then each sequence's new state.
  ggml_tensor* out = ggml_gated_delta_net(ctx, q, k, v, g_grp, b_grp, delta, /*K=*/1);
  const int64_t n_out = hd * s.n_v_heads * n_t * n_s;
  ggml_tensor* delta_next =
      ggml_view_2d(ctx, out, s.delta_state_size(), n_s, ggml_row_size(out->type, s.delta_state_size()),
                   ggml_row_size(out->type, n_out));
  ggml_build_forward_expand(g.graph, ggml_set_rows(ctx, state.delta, delta_next, grp.slots));
  return ggml_view_3d(ctx, out, hd, s.n_v_heads, n_t * n_s, hd * f, hd * s.n_v_heads * f, 0);
}

// The gated delta-net mixer over every row of the batch: [n_embd, n_rows] -> [n_embd, n_rows].
ggml_tensor* gated_delta_net(GraphContext& g, const Model& model, const LayerWeights& l, ggml_tensor* x,
                             int il) {
  const ModelConfig& c = model.config();
  const SsmConfig& s = c.ssm;
  ggml_context* ctx = g.ctx;
  ggml_tensor* qkv = lora_linear(g, model, l.ssm_qkv, x, il, LoraTarget::attn_qkv);
  ggml_tensor* z = lora_linear(g, model, l.ssm_gate, x, il, LoraTarget::attn_gate);
  ggml_tensor* beta = ggml_sigmoid(ctx, lora_linear(g, model, l.ssm_beta, x, il, LoraTarget::ssm_beta));
  ggml_tensor* alpha = lora_linear(g, model, l.ssm_alpha, x, il, LoraTarget::ssm_alpha);
  ggml_tensor* gate = ggml_mul(ctx, ggml_softplus(ctx, ggml_add(ctx, alpha, l.ssm_dt)), l.ssm_a);

  const RecurrentInputs::Layer& state = g.recurrent.layers[size_t(il)];
  std::vector<ggml_tensor*> outs;
  for (const RecurrentInputs::Group& grp : g.recurrent.groups) {
    outs.push_back(delta_net_group(g, c, l, state, grp, qkv, gate, beta));
  }
  while (outs.size() > 1) {  // joined pairwise, as attention's groups are
    std::vector<ggml_tensor*> joined;
    for (size_t i = 0; i + 1 < outs.size(); i += 2)
      joined.push_back(ggml_concat(ctx, outs[i], outs[i + 1], 2));
    if (outs.size() % 2 == 1) joined.push_back(outs.back());
    outs = std::move(joined);
  }
  ggml_tensor* o = rms_norm(g, outs[0], l.ssm_norm, c.rms_eps);  // [hd, n_v_heads, n_rows]
  o = ggml_mul(ctx, o, ggml_silu(ctx, ggml_reshape_3d(ctx, z, s.head_dim, s.n_v_heads, g.n_rows)));
  o = ggml_reshape_2d(ctx, o, s.value_dim(), g.n_rows);
  return lora_linear(g, model, l.ssm_out, o, il, LoraTarget::ssm_out);
}

}  // namespace

ggml_tensor* build_qwen35(GraphContext& g, const Model& model) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  ggml_context* ctx = g.ctx;

  ggml_tensor* x = ggml_get_rows(ctx, w.tok_embd, g.tokens);
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& l = w.layers[size_t(il)];
    ggml_tensor* h = rms_norm(g, x, l.attn_norm, c.rms_eps);
    h = c.is_recurrent(il) ? gated_delta_net(g, model, l, h, il) : gated_attention(g, model, l, h, il);
    if (il == c.n_layer - 1) {
      // Every row runs every mixer (the recurrent states and the KV cache
      // need all of them); only the wanted rows go on to the last MLP.
      h = select_output_rows(g, h);
      x = select_output_rows(g, x);
    }
    x = ggml_add(ctx, h, x);
    h = rms_norm(g, x, l.ffn_norm, c.rms_eps);
    h = swiglu_ffn(g, model, l, h, il);
    x = ggml_add(ctx, h, x);
  }
  return output_logits(g, model, x);
}

}  // namespace graft

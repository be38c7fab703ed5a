// The Gemma 3 family: pre-norm blocks whose attention and MLP outputs are
// RMS-normed again before their residual adds, RMS norms on each q and k
// head, NEOX-mode rope and a GELU-gated MLP. Token embeddings are scaled by
// sqrt(n_embd) and the output reuses them (tied) unless the file has its own.
// Layers alternate between local ones, which attend to a sliding window of
// the last `sliding_window` positions and rope with their own base, and
// global ones over the whole sequence: in each period of
// `sliding_window_pattern` layers (6 by default) all but the last are local.
#include <cmath>

#include <gguf.h>

#include "model/arch.h"
#include "model/layers.h"
#include "model/weights_loader.h"

namespace graft {

Status read_gemma3_config(const GgufFile& f, ModelConfig& c) {
  const std::string a = c.arch + ".";
  if (c.rope.n_rot != c.head_dim) {
    return errorf("invalid_model", "{}: partial rope ({} of {} dims) is not supported", f.path(),
                  c.rope.n_rot, c.head_dim);
  }
  const int64_t window = f.find_int(a + "attention.sliding_window").value_or(0);
  if (window < 0 || window > (int64_t(1) << 30)) {
    return errorf("invalid_model", "{}: bad value {} for '{}attention.sliding_window'", f.path(), window, a);
  }
  c.sliding.assign(size_t(c.n_layer), false);
  if (window > 0) {
    c.sliding_window = int(window);
    int64_t period = 6;
    const std::string pattern_key = a + "attention.sliding_window_pattern";
    if (f.has(pattern_key)) {
      auto p = f.get_int(pattern_key);
      if (!p) {
        return errorf("unsupported_model", "{}: '{}' is not a single period, which graft does not support",
                      f.path(), pattern_key);
      }
      period = *p;
    }
    if (period < 0 || period > c.n_layer + 1) {
      return errorf("invalid_model", "{}: bad value {} for '{}'", f.path(), period, pattern_key);
    }
    // Period 0: every layer is local.
    for (int il = 0; il < c.n_layer; ++il) c.sliding[size_t(il)] = period == 0 || il % period < period - 1;
    c.rope_local = c.rope;
    c.rope_local.freq_base = float(f.find_float(a + "rope.freq_base_swa").value_or(10000.0));
    c.rope_local.freq_scale = 1.0f;  // rope scaling stretches the global layers only
    c.rope_local.scaling = "";
  }
  // The attention scale: the file's, else 1/sqrt(query_pre_attn_scalar),
  // which is head_dim for every Gemma 3 but the 27B (62 layers), whose is
  // n_embd / n_head.
  const double scale = f.find_float(a + "attention.scale").value_or(0.0);
  if (scale < 0.0) return errorf("invalid_model", "{}: bad attention scale {}", f.path(), scale);
  if (scale > 0.0) {
    c.kq_scale = float(scale);
  } else if (c.n_layer == 62) {
    c.kq_scale = 1.0f / std::sqrt(float(c.n_embd / c.n_head));
  } else {
    c.kq_scale = 1.0f / std::sqrt(float(c.head_dim));
  }
  const double softcap = f.find_float(a + "final_logit_softcapping").value_or(0.0);
  if (softcap < 0.0) return errorf("invalid_model", "{}: bad final logit softcapping {}", f.path(), softcap);
  c.logit_softcap = float(softcap);
  c.embd_scale = std::sqrt(float(c.n_embd));
  c.qk_norm = true;
  return {};
}

Status load_gemma3_layer(WeightsLoader& loader, const ModelConfig& c, int il, LayerWeights& l) {
  const std::string p = "blk." + std::to_string(il) + ".";
  const int64_t n_embd = c.n_embd, n_q = c.n_embd_q(), n_kv = c.n_embd_kv(), n_ff = c.n_ff;
  if (il == 0 && loader.has("rope_freqs.weight")) {
    return errorf("unsupported_model",
                  "gemma3 with rope frequency factors ('rope_freqs.weight') is not supported");
  }
  GRAFT_TRY(l.attn_norm, loader.vector(p + "attn_norm.weight", n_embd));
  GRAFT_TRY(l.wq, loader.matrix(p + "attn_q.weight", {n_embd, n_q}));
  GRAFT_TRY(l.wk, loader.matrix(p + "attn_k.weight", {n_embd, n_kv}));
  GRAFT_TRY(l.wv, loader.matrix(p + "attn_v.weight", {n_embd, n_kv}));
  GRAFT_TRY(l.wo, loader.matrix(p + "attn_output.weight", {n_q, n_embd}));
  GRAFT_TRY(l.q_norm, loader.vector(p + "attn_q_norm.weight", c.head_dim));
  GRAFT_TRY(l.k_norm, loader.vector(p + "attn_k_norm.weight", c.head_dim));
  GRAFT_TRY(l.attn_post_norm, loader.vector(p + "post_attention_norm.weight", n_embd));
  GRAFT_TRY(l.ffn_norm, loader.vector(p + "ffn_norm.weight", n_embd));
  GRAFT_TRY(l.ffn_gate, loader.matrix(p + "ffn_gate.weight", {n_embd, n_ff}));
  GRAFT_TRY(l.ffn_up, loader.matrix(p + "ffn_up.weight", {n_embd, n_ff}));
  GRAFT_TRY(l.ffn_down, loader.matrix(p + "ffn_down.weight", {n_ff, n_embd}));
  GRAFT_TRY(l.ffn_post_norm, loader.vector(p + "post_ffw_norm.weight", n_embd));
  return {};
}

ggml_tensor* build_gemma3(GraphContext& g, const Model& model) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  ggml_context* ctx = g.ctx;

  // Hidden states handed in (a later part of the model) are already scaled.
  ggml_tensor* x = g.hidden_in ? g.hidden_in : ggml_scale(ctx, input_hidden(g, model), c.embd_scale);
  const LayerRange layers = layer_range(g, model);
  for (int il = layers.begin; il < layers.end; ++il) {
    const LayerWeights& l = w.layers[size_t(il)];
    const bool local = c.is_sliding(il);
    const RopeConfig& rope_config = local ? c.rope_local : c.rope;
    ggml_tensor* residual = x;
    ggml_tensor* h = rms_norm(g, x, l.attn_norm, c.rms_eps);

    ggml_tensor* q = lora_linear(g, model, l.wq, h, il, LoraTarget::attn_q);
    ggml_tensor* k = lora_linear(g, model, l.wk, h, il, LoraTarget::attn_k);
    ggml_tensor* v = lora_linear(g, model, l.wv, h, il, LoraTarget::attn_v);
    q = ggml_reshape_3d(ctx, q, c.head_dim, c.n_head, g.n_rows);
    k = ggml_reshape_3d(ctx, k, c.head_dim, c.n_head_kv, g.n_rows);
    v = ggml_reshape_3d(ctx, v, c.head_dim, c.n_head_kv, g.n_rows);
    q = rope(g, rms_norm(g, q, l.q_norm, c.rms_eps), rope_config, nullptr);
    k = rope(g, rms_norm(g, k, l.k_norm, c.rms_eps), rope_config, nullptr);
    // The scale goes onto q before attention (not into its softmax), as
    // Gemma's reference does; that rounds differently through F16 keys.
    q = ggml_scale(ctx, q, c.kq_scale);

    h = attention(g, il, q, k, v, 1.0f, local);
    h = lora_linear(g, model, l.wo, h, il, LoraTarget::attn_output);
    if (il == c.n_layer - 1) {
      h = select_output_rows(g, h);
      residual = select_output_rows(g, residual);
    }
    h = rms_norm(g, h, l.attn_post_norm, c.rms_eps);
    x = ggml_add(ctx, h, residual);

    h = rms_norm(g, x, l.ffn_norm, c.rms_eps);
    h = geglu_ffn(g, model, l, h, il);
    h = rms_norm(g, h, l.ffn_post_norm, c.rms_eps);
    x = ggml_add(ctx, h, x);
  }
  return finish_graph(g, model, x);
}

}  // namespace graft

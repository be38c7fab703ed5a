// The MiniCPM family: llama-shaped blocks (NORM-mode rope, SwiGLU MLP) with
// the scalings of its muP-style training, all declared in the GGUF: token
// embeddings x embedding_scale, each block's attention and MLP outputs x
// residual_scale (scale_depth / sqrt(n_layer)) before their residual adds,
// and the logits divided by logit_scale (n_embd / dim_model_base).
#include <cmath>

#include "model/arch.h"
#include "model/layers.h"
#include "model/weights_loader.h"

namespace graft {

Status read_minicpm_config(const GgufFile& f, ModelConfig& c) {
  const std::string a = c.arch + ".";
  if (c.rope.n_rot != c.head_dim) {
    return errorf("invalid_model", "{}: partial rope ({} of {} dims) is not supported", f.path(),
                  c.rope.n_rot, c.head_dim);
  }
  // Files written before these keys existed carry MiniCPM 2B's values.
  const double embd_scale = f.find_float(a + "embedding_scale").value_or(12.0);
  const double residual_scale =
      f.find_float(a + "residual_scale").value_or(1.4 / std::sqrt(double(c.n_layer)));
  const double logit_scale = f.find_float(a + "logit_scale").value_or(256.0 / double(c.n_embd));
  for (const auto& [key, value] :
       {std::pair{"embedding_scale", embd_scale}, std::pair{"residual_scale", residual_scale},
        std::pair{"logit_scale", logit_scale}}) {
    if (!(value > 0.0) || !std::isfinite(value)) {
      return errorf("invalid_model", "{}: bad value {} for '{}{}'", f.path(), value, a, key);
    }
  }
  if (f.find_float(a + "attention.scale").value_or(0.0) != 0.0) {
    return errorf("unsupported_model", "{}: a custom attention scale is not supported for minicpm", f.path());
  }
  c.embd_scale = float(embd_scale);
  c.residual_scale = float(residual_scale);
  c.logit_scale = float(1.0 / logit_scale);
  return {};
}

Status load_minicpm_layer(WeightsLoader& loader, const ModelConfig& c, int il, LayerWeights& l) {
  const std::string p = "blk." + std::to_string(il) + ".";
  const int64_t n_embd = c.n_embd, n_q = c.n_embd_q(), n_kv = c.n_embd_kv(), n_ff = c.n_ff;
  if (il == 0) {
    for (const char* name : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
      if (loader.has(name)) {
        return errorf("unsupported_model", "minicpm with long-context rope factors ('{}') is not supported",
                      name);
      }
    }
  }
  for (const char* name : {"ffn_gate.bias", "ffn_up.bias", "ffn_down.bias", "ffn_gate_inp.weight"}) {
    if (loader.has(p + name)) {
      return errorf("unsupported_model", "minicpm with '{}{}' (MLP biases or experts) is not supported", p,
                    name);
    }
  }
  GRAFT_TRY(l.attn_norm, loader.vector(p + "attn_norm.weight", n_embd));
  GRAFT_TRY(l.wq, loader.matrix(p + "attn_q.weight", {n_embd, n_q}));
  GRAFT_TRY(l.wk, loader.matrix(p + "attn_k.weight", {n_embd, n_kv}));
  GRAFT_TRY(l.wv, loader.matrix(p + "attn_v.weight", {n_embd, n_kv}));
  GRAFT_TRY(l.wo, loader.matrix(p + "attn_output.weight", {n_q, n_embd}));
  if (loader.has(p + "attn_output.bias")) {
    GRAFT_TRY(l.bo, loader.vector(p + "attn_output.bias", n_embd));
  }
  GRAFT_TRY(l.ffn_norm, loader.vector(p + "ffn_norm.weight", n_embd));
  GRAFT_TRY(l.ffn_gate, loader.matrix(p + "ffn_gate.weight", {n_embd, n_ff}));
  GRAFT_TRY(l.ffn_up, loader.matrix(p + "ffn_up.weight", {n_embd, n_ff}));
  GRAFT_TRY(l.ffn_down, loader.matrix(p + "ffn_down.weight", {n_ff, n_embd}));
  return {};
}

ggml_tensor* build_minicpm(GraphContext& g, const Model& model) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  ggml_context* ctx = g.ctx;
  const float kq_scale = 1.0f / std::sqrt(float(c.head_dim));

  // Hidden states handed in (a later part of the model) are already scaled.
  ggml_tensor* x = g.hidden_in ? g.hidden_in : ggml_scale(ctx, input_hidden(g, model), c.embd_scale);
  const LayerRange layers = layer_range(g, model);
  for (int il = layers.begin; il < layers.end; ++il) {
    const LayerWeights& l = w.layers[size_t(il)];
    ggml_tensor* residual = x;
    ggml_tensor* h = rms_norm(g, x, l.attn_norm, c.rms_eps);

    ggml_tensor* q = lora_linear(g, model, l.wq, h, il, LoraTarget::attn_q);
    ggml_tensor* k = lora_linear(g, model, l.wk, h, il, LoraTarget::attn_k);
    ggml_tensor* v = lora_linear(g, model, l.wv, h, il, LoraTarget::attn_v);
    q = ggml_reshape_3d(ctx, q, c.head_dim, c.n_head, g.n_rows);
    k = ggml_reshape_3d(ctx, k, c.head_dim, c.n_head_kv, g.n_rows);
    v = ggml_reshape_3d(ctx, v, c.head_dim, c.n_head_kv, g.n_rows);
    q = rope(g, q, c.rope, w.rope_freqs);
    k = rope(g, k, c.rope, w.rope_freqs);

    h = attention(g, il, q, k, v, kq_scale);
    h = lora_linear(g, model, l.wo, h, il, LoraTarget::attn_output, l.bo);
    if (il == c.n_layer - 1) {
      h = select_output_rows(g, h);
      residual = select_output_rows(g, residual);
    }
    x = ggml_add(ctx, ggml_scale(ctx, h, c.residual_scale), residual);

    h = rms_norm(g, x, l.ffn_norm, c.rms_eps);
    h = swiglu_ffn(g, model, l, h, il);
    x = ggml_add(ctx, ggml_scale(ctx, h, c.residual_scale), x);
  }
  return finish_graph(g, model, x);
}

}  // namespace graft

// The Qwen family: llama-shaped blocks with NEOX-mode rope; qwen2 adds biases
// to q, k and v, qwen3 instead RMS-normalizes each q and k head before rope.
#include <cmath>

#include "model/arch.h"
#include "model/layers.h"

namespace graft {

ggml_tensor* build_qwen(GraphContext& g, const Model& model) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  ggml_context* ctx = g.ctx;
  const float kq_scale = 1.0f / std::sqrt(float(c.head_dim));

  ggml_tensor* x = input_hidden(g, model);
  const LayerRange layers = layer_range(g, model);
  for (int il = layers.begin; il < layers.end; ++il) {
    const LayerWeights& l = w.layers[size_t(il)];
    ggml_tensor* residual = x;
    ggml_tensor* h = rms_norm(g, x, l.attn_norm, c.rms_eps);

    ggml_tensor* q = lora_linear(g, model, l.wq, h, il, LoraTarget::attn_q, l.bq);
    ggml_tensor* k = lora_linear(g, model, l.wk, h, il, LoraTarget::attn_k, l.bk);
    ggml_tensor* v = lora_linear(g, model, l.wv, h, il, LoraTarget::attn_v, l.bv);
    q = ggml_reshape_3d(ctx, q, c.head_dim, c.n_head, g.n_rows);
    k = ggml_reshape_3d(ctx, k, c.head_dim, c.n_head_kv, g.n_rows);
    v = ggml_reshape_3d(ctx, v, c.head_dim, c.n_head_kv, g.n_rows);
    if (c.qk_norm) {
      q = rms_norm(g, q, l.q_norm, c.rms_eps);
      k = rms_norm(g, k, l.k_norm, c.rms_eps);
    }
    q = rope(g, q, c.rope, nullptr);
    k = rope(g, k, c.rope, nullptr);

    h = attention(g, il, q, k, v, kq_scale);
    h = lora_linear(g, model, l.wo, h, il, LoraTarget::attn_output);
    if (il == c.n_layer - 1) {
      h = select_output_rows(g, h);
      residual = select_output_rows(g, residual);
    }
    x = ggml_add(ctx, h, residual);

    h = rms_norm(g, x, l.ffn_norm, c.rms_eps);
    h = swiglu_ffn(g, model, l, h, il);
    x = ggml_add(ctx, h, x);
  }
  return finish_graph(g, model, x);
}

}  // namespace graft

// The Gemma 4 family (GGUF `gemma4`, the dense E2B/E4B-style models): Gemma
// 3's block (RMS norms before and after attention and MLP, RMS norms on each
// q and k head, NEOX rope, GELU-gated MLP, embeddings scaled by sqrt(n_embd),
// tied output, final logit softcapping), plus:
//  - which layers are local (sliding window) is a per-layer list, and local
//    layers have narrower heads (key_length_swa) and their own rope base;
//    the global layers rope only part of each head, through frequency
//    factors (rope_freqs.weight) that stop the other dimensions;
//  - attention is unscaled (scale 1), and v is RMS-normed (no weight) too;
//  - the last `shared_kv_layers` layers compute no keys or values: each
//    attends over those of the last earlier layer of its kind;
//  - per-layer token inputs: a second embedding gives each token a small
//    vector per layer, added to a projection of its scaled token embedding;
//    after its MLP, each layer gates its slice with a projection of its
//    hidden state (GELU) and adds that back, projected and normed;
//  - each layer's output is multiplied by a learned scalar;
//  - FFN widths may differ per layer (wider in the shared-KV layers).
// Mixture-of-experts layers (the 26B-A4B) and k-as-v attention (no
// attn_v, the 31B) are not supported and named as such.
#include <algorithm>
#include <cmath>

#include <gguf.h>

#include "model/arch.h"
#include "model/layers.h"
#include "model/weights_loader.h"

namespace graft {

namespace {

// The per-layer sliding flags: a bool (or integer) array, one per layer.
Status read_sliding_layers(const GgufFile& f, const std::string& key, ModelConfig& c) {
  gguf_context* ctx = f.raw();
  const int64_t id = gguf_find_key(ctx, key.c_str());
  if (id < 0) return errorf("invalid_model", "{}: missing metadata key '{}'", f.path(), key);
  if (gguf_get_kv_type(ctx, id) != GGUF_TYPE_ARRAY) {
    return errorf("unsupported_model",
                  "{}: '{}' is not a per-layer list, which graft does not support for gemma4", f.path(), key);
  }
  const size_t n = gguf_get_arr_n(ctx, id);
  if (n != size_t(c.n_layer)) {
    return errorf("invalid_model", "{}: '{}' has {} entries for {} layers", f.path(), key, n, c.n_layer);
  }
  c.sliding.assign(n, false);
  const gguf_type t = gguf_get_arr_type(ctx, id);
  if (t == GGUF_TYPE_BOOL || t == GGUF_TYPE_INT8 || t == GGUF_TYPE_UINT8) {
    const auto* data = static_cast<const int8_t*>(gguf_get_arr_data(ctx, id));
    for (size_t i = 0; i < n; ++i) c.sliding[i] = data[i] != 0;
    return {};
  }
  GRAFT_TRY(std::vector<int64_t> flags, f.get_int_array(key));
  for (size_t i = 0; i < n; ++i) c.sliding[i] = flags[i] != 0;
  return {};
}

}  // namespace

Status read_gemma4_config(const GgufFile& f, ModelConfig& c) {
  const std::string a = c.arch + ".";
  // One key/value head count for every layer.
  if (auto heads = f.get_int_array(a + "attention.head_count_kv")) {
    if (heads->size() != size_t(c.n_layer) ||
        std::any_of(heads->begin(), heads->end(), [&](int64_t h) { return h != heads->front(); })) {
      return errorf("unsupported_model", "{}: per-layer key/value head counts are not supported", f.path());
    }
    c.n_head_kv = int(heads->front());
    if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0) {
      return errorf("invalid_model", "{}: head_count ({}) is not a multiple of head_count_kv ({})", f.path(),
                    c.n_head, c.n_head_kv);
    }
  }
  if (auto widths = f.get_int_array(a + "feed_forward_length")) {
    if (widths->size() != size_t(c.n_layer)) {
      return errorf("invalid_model", "{}: '{}feed_forward_length' has {} entries for {} layers", f.path(), a,
                    widths->size(), c.n_layer);
    }
    for (int64_t w : *widths) {
      if (w <= 0 || w > (int64_t(1) << 30)) {
        return errorf("invalid_model", "{}: bad value {} in '{}feed_forward_length'", f.path(), w, a);
      }
      c.n_ff_layers.push_back(int(w));
    }
  }
  if (f.has(a + "expert_count") && f.find_int(a + "expert_count").value_or(0) > 0) {
    return errorf("unsupported_model", "{}: gemma4 mixture-of-experts models are not supported", f.path());
  }

  // Heads: global layers head_dim wide, local ones key_length_swa wide.
  c.head_dim_local = int(f.find_int(a + "attention.key_length_swa").value_or(c.head_dim));
  const int v_local = int(f.find_int(a + "attention.value_length_swa").value_or(c.head_dim_local));
  if (c.head_dim_local <= 0 || c.head_dim_local > c.head_dim || v_local != c.head_dim_local) {
    return errorf("unsupported_model",
                  "{}: local head widths (k {}, v {}) must be equal and at most the global ones ({})",
                  f.path(), c.head_dim_local, v_local, c.head_dim);
  }
  // Global layers rope the whole head (rope_freqs.weight stops the
  // dimensions Gemma 4 leaves unrotated); local ones rope_local.n_rot of theirs.
  if (c.rope.n_rot != c.head_dim) {
    return errorf("invalid_model", "{}: rope over {} of the global layers' {} dims is not supported",
                  f.path(), c.rope.n_rot, c.head_dim);
  }
  c.rope_local = c.rope;
  c.rope_local.n_rot = int(f.find_int(a + "rope.dimension_count_swa").value_or(c.rope.n_rot));
  if (c.rope_local.n_rot <= 0 || c.rope_local.n_rot > c.head_dim_local || c.rope_local.n_rot % 2 != 0) {
    return errorf("invalid_model", "{}: bad local rope width {} for heads of {}", f.path(),
                  c.rope_local.n_rot, c.head_dim_local);
  }
  c.rope_local.freq_base = float(f.find_float(a + "rope.freq_base_swa").value_or(10000.0));
  c.rope_local.freq_scale = 1.0f;
  c.rope_local.scaling = "";

  const int64_t window = f.find_int(a + "attention.sliding_window").value_or(0);
  if (window <= 0 || window > (int64_t(1) << 30)) {
    return errorf("invalid_model", "{}: bad or missing '{}attention.sliding_window' ({})", f.path(), a,
                  window);
  }
  c.sliding_window = int(window);
  GRAFT_TRY_STATUS(read_sliding_layers(f, a + "attention.sliding_window_pattern", c));

  const int64_t shared = f.find_int(a + "attention.shared_kv_layers").value_or(0);
  if (shared < 0 || shared > c.n_layer - 2) {
    return errorf("invalid_model", "{}: bad value {} for '{}attention.shared_kv_layers'", f.path(), shared,
                  a);
  }
  if (shared > 0) {
    // Shared layers read the last layer with keys and values of their kind,
    // which llama.cpp takes to be the global layer just before them and the
    // local one before that.
    c.kv_shared_from = int(c.n_layer - shared);
    if (c.is_sliding(c.kv_shared_from - 1) || !c.is_sliding(c.kv_shared_from - 2)) {
      return errorf("unsupported_model",
                    "{}: the two layers before the shared-KV ones must be local then global", f.path());
    }
  }
  const int64_t per_layer = f.find_int(a + "embedding_length_per_layer_input").value_or(0);
  if (per_layer < 0 || per_layer > (int64_t(1) << 20)) {
    return errorf("invalid_model", "{}: bad value {} for '{}embedding_length_per_layer_input'", f.path(),
                  per_layer, a);
  }
  c.n_embd_per_layer = int(per_layer);

  const double softcap = f.find_float(a + "final_logit_softcapping").value_or(0.0);
  if (softcap < 0.0) return errorf("invalid_model", "{}: bad final logit softcapping {}", f.path(), softcap);
  c.logit_softcap = float(softcap);
  c.kq_scale = 1.0f;
  c.embd_scale = std::sqrt(float(c.n_embd));
  c.qk_norm = true;
  return {};
}

Status load_gemma4_layer(WeightsLoader& loader, const ModelConfig& c, int il, LayerWeights& l) {
  const std::string p = "blk." + std::to_string(il) + ".";
  const int64_t n_embd = c.n_embd, head_dim = c.head_dim_of(il), n_ff = c.n_ff_of(il);
  const int64_t n_q = head_dim * c.n_head, n_kv = head_dim * c.n_head_kv;
  if (il == 0) {
    if (loader.has("blk.0.ffn_gate_inp.weight")) {
      return errorf("unsupported_model", "gemma4 mixture-of-experts layers are not supported");
    }
    // (Model::load_weights has read rope_freqs.weight, head_dim / 2 factors.)
    if (!loader.has("rope_freqs.weight")) {
      return errorf("invalid_model", "gemma4 without the global layers' rope factors ('rope_freqs.weight')");
    }
  }
  GRAFT_TRY(l.attn_norm, loader.vector(p + "attn_norm.weight", n_embd));
  GRAFT_TRY(l.wq, loader.matrix(p + "attn_q.weight", {n_embd, n_q}));
  GRAFT_TRY(l.q_norm, loader.vector(p + "attn_q_norm.weight", head_dim));
  if (c.kv_layer_of(il) == il) {
    if (!loader.has(p + "attn_v.weight")) {
      return errorf("unsupported_model", "gemma4 layers without attn_v (keys as values) are not supported");
    }
    GRAFT_TRY(l.wk, loader.matrix(p + "attn_k.weight", {n_embd, n_kv}));
    GRAFT_TRY(l.wv, loader.matrix(p + "attn_v.weight", {n_embd, n_kv}));
    GRAFT_TRY(l.k_norm, loader.vector(p + "attn_k_norm.weight", head_dim));
  }
  GRAFT_TRY(l.wo, loader.matrix(p + "attn_output.weight", {n_q, n_embd}));
  GRAFT_TRY(l.attn_post_norm, loader.vector(p + "post_attention_norm.weight", n_embd));
  GRAFT_TRY(l.ffn_norm, loader.vector(p + "ffn_norm.weight", n_embd));
  GRAFT_TRY(l.ffn_gate, loader.matrix(p + "ffn_gate.weight", {n_embd, n_ff}));
  GRAFT_TRY(l.ffn_up, loader.matrix(p + "ffn_up.weight", {n_embd, n_ff}));
  GRAFT_TRY(l.ffn_down, loader.matrix(p + "ffn_down.weight", {n_ff, n_embd}));
  GRAFT_TRY(l.ffn_post_norm, loader.vector(p + "post_ffw_norm.weight", n_embd));
  if (loader.has(p + "layer_output_scale.weight")) {
    GRAFT_TRY(l.out_scale, loader.vector(p + "layer_output_scale.weight", 1));
  }
  if (c.n_embd_per_layer > 0) {
    const int64_t n_pl = c.n_embd_per_layer;
    GRAFT_TRY(l.per_layer_gate, loader.matrix(p + "inp_gate.weight", {n_embd, n_pl}));
    GRAFT_TRY(l.per_layer_proj, loader.matrix(p + "proj.weight", {n_pl, n_embd}));
    GRAFT_TRY(l.per_layer_post_norm, loader.vector(p + "post_norm.weight", n_embd));
  }
  return {};
}

Status load_gemma4_weights(WeightsLoader& loader, const ModelConfig& c, ModelWeights& w) {
  if (c.n_embd_per_layer == 0) return {};
  const int64_t width = int64_t(c.n_embd_per_layer) * c.n_layer;
  GRAFT_TRY(w.per_layer_tok_embd, loader.input("per_layer_token_embd.weight", {width, c.n_vocab}));
  GRAFT_TRY(w.per_layer_model_proj, loader.matrix("per_layer_model_proj.weight", {c.n_embd, width}));
  GRAFT_TRY(w.per_layer_proj_norm, loader.vector("per_layer_proj_norm.weight", c.n_embd_per_layer));
  return {};
}

namespace {

// Each row's per-layer inputs, [n_embd_per_layer, n_rows, n_layer] (one
// contiguous slice per layer): the per-layer embedding of its token x
// sqrt(n_embd_per_layer), plus the RMS-normed projection of its scaled token
// embedding x0 (divided by sqrt(n_embd)), the sum divided by sqrt(2).
ggml_tensor* per_layer_inputs(GraphContext& g, const Model& model, ggml_tensor* x0) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  ggml_context* ctx = g.ctx;
  const int64_t n_pl = c.n_embd_per_layer;
  ggml_tensor* tok = ggml_get_rows(ctx, w.per_layer_tok_embd, g.tokens);
  tok = ggml_reshape_3d(ctx, tok, n_pl, c.n_layer, g.n_rows);
  tok = ggml_scale(ctx, tok, std::sqrt(float(n_pl)));
  ggml_tensor* proj = mul_mat(g, w.per_layer_model_proj, x0);
  proj = ggml_scale(ctx, proj, 1.0f / std::sqrt(float(c.n_embd)));
  proj = ggml_reshape_3d(ctx, proj, n_pl, c.n_layer, g.n_rows);
  proj = rms_norm(g, proj, w.per_layer_proj_norm, c.rms_eps);
  ggml_tensor* in = ggml_scale(ctx, ggml_add(ctx, proj, tok), 1.0f / std::sqrt(2.0f));
  return ggml_cont(ctx, ggml_permute(ctx, in, 0, 2, 1, 3));
}

}  // namespace

ggml_tensor* build_gemma4(GraphContext& g, const Model& model) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  ggml_context* ctx = g.ctx;
  const LayerRange layers = layer_range(g, model);

  // Per-layer inputs come from the tokens' embeddings, so a part of the model
  // that starts later (hidden states handed in) still needs the tokens.
  ggml_tensor* x0 = nullptr;
  if (!g.hidden_in || (c.n_embd_per_layer > 0 && g.tokens)) {
    x0 = ggml_scale(ctx, ggml_get_rows(ctx, w.tok_embd, g.tokens), c.embd_scale);
  }
  ggml_tensor* x = g.hidden_in ? g.hidden_in : x0;
  ggml_tensor* per_layer = nullptr;
  if (c.n_embd_per_layer > 0) {
    GGML_ASSERT(x0 && "gemma4's per-layer inputs need the batch's tokens");
    per_layer = per_layer_inputs(g, model, x0);
  }

  // The keys and values of the layers that others share (training attends
  // over them directly).
  std::vector<ggml_tensor*> keys(size_t(c.n_layer)), values(size_t(c.n_layer));
  for (int il = layers.begin; il < layers.end; ++il) {
    const LayerWeights& l = w.layers[size_t(il)];
    const bool local = c.is_sliding(il);
    const RopeConfig& rope_config = local ? c.rope_local : c.rope;
    ggml_tensor* freq_factors = local ? nullptr : w.rope_freqs;
    const int64_t head_dim = c.head_dim_of(il);
    const int kv_layer = c.kv_layer_of(il);
    ggml_tensor* residual = x;
    ggml_tensor* h = rms_norm(g, x, l.attn_norm, c.rms_eps);

    ggml_tensor* q = lora_linear(g, model, l.wq, h, il, LoraTarget::attn_q);
    q = ggml_reshape_3d(ctx, q, head_dim, c.n_head, g.n_rows);
    q = rope(g, rms_norm(g, q, l.q_norm, c.rms_eps), rope_config, freq_factors);
    if (kv_layer == il) {
      ggml_tensor* k = lora_linear(g, model, l.wk, h, il, LoraTarget::attn_k);
      ggml_tensor* v = lora_linear(g, model, l.wv, h, il, LoraTarget::attn_v);
      k = ggml_reshape_3d(ctx, k, head_dim, c.n_head_kv, g.n_rows);
      v = ggml_reshape_3d(ctx, v, head_dim, c.n_head_kv, g.n_rows);
      k = rope(g, rms_norm(g, k, l.k_norm, c.rms_eps), rope_config, freq_factors);
      v = rms_norm(g, v, nullptr, c.rms_eps);
      keys[size_t(il)] = k;
      values[size_t(il)] = v;
      h = attention(g, il, q, k, v, c.kq_scale, local);
    } else {
      ggml_tensor* k = keys[size_t(kv_layer)];
      ggml_tensor* v = values[size_t(kv_layer)];
      if (!k) {
        // The shared layer was not built in this graph (a later part of the
        // model): only its cache is at hand, so only its shape matters.
        GGML_ASSERT(!g.training && "gemma4's shared-KV layers train only in a whole-model graph");
        k = v = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, head_dim, c.n_head_kv, g.n_rows);
      }
      h = attention(g, kv_layer, q, k, v, c.kq_scale, local, /*store=*/false);
    }
    h = lora_linear(g, model, l.wo, h, il, LoraTarget::attn_output);
    ggml_tensor* layer_in = nullptr;
    if (per_layer) {
      layer_in = ggml_view_2d(ctx, per_layer, c.n_embd_per_layer, g.n_rows, per_layer->nb[1],
                              size_t(il) * per_layer->nb[2]);
    }
    if (il == c.n_layer - 1) {
      h = select_output_rows(g, h);
      residual = select_output_rows(g, residual);
      if (layer_in) layer_in = select_output_rows(g, layer_in);
    }
    h = rms_norm(g, h, l.attn_post_norm, c.rms_eps);
    x = ggml_add(ctx, h, residual);

    h = rms_norm(g, x, l.ffn_norm, c.rms_eps);
    h = geglu_ffn(g, model, l, h, il);
    h = rms_norm(g, h, l.ffn_post_norm, c.rms_eps);
    x = ggml_add(ctx, h, x);

    if (layer_in) {
      ggml_tensor* gate = lora_linear(g, model, l.per_layer_gate, x, il, LoraTarget::per_layer_gate);
      h = lora_linear(g, model, l.per_layer_proj, ggml_mul(ctx, ggml_gelu(ctx, gate), layer_in), il,
                      LoraTarget::per_layer_proj);
      x = ggml_add(ctx, x, rms_norm(g, h, l.per_layer_post_norm, c.rms_eps));
    }
    if (l.out_scale) x = ggml_mul(ctx, x, l.out_scale);
  }
  return finish_graph(g, model, x);
}

}  // namespace graft

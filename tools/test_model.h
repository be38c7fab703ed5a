// The test-model maker: writes a deterministic random-weight GGUF model of any
// shape for a supported architecture, with the tokenizer copied from a real
// vocabulary GGUF, so that graft and llama.cpp load the very same file.
#pragma once

#include <cstdint>
#include <string>

#include "util/result.h"

namespace graft {

struct TestModelSpec {
  std::string arch = "llama";  // "llama", "qwen2", "qwen3", "qwen35", "gemma3", "gemma4" or "minicpm"
  std::string vocab_path;      // a GGUF holding tokenizer.ggml.* metadata
  std::string name = "graft-test-model";
  int n_embd = 256;
  int n_layer = 2;
  int n_head = 4;
  int n_head_kv = 2;
  int head_dim = 0;  // 0: n_embd / n_head
  int n_ff = 512;
  int n_ctx = 2048;
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  std::string rope_scaling;  // "", "linear" or "llama3"
  float rope_scaling_factor = 1.0f;
  int rope_orig_ctx = 0;     // llama3 scaling: original context length
  std::string type = "f16";  // weight type of 2-D tensors: f32, f16, bf16, q8_0, q4_0, q4_1, q4_k, q5_k, q6_k
  bool tied_output = false;  // no output.weight: the embedding is reused
  uint64_t seed = 42;
  float logit_scale = 4.0f;        // standard deviation of the logits of readable tokens
  float unreadable_scale = 0.05f;  // output rows of non-word tokens are scaled by this
  // qwen35 only: gated delta-net (linear attention) layers, all but every
  // full_attention_interval-th; rope over rope_dims of each head (0: a
  // quarter, as Qwen3.5 does). 0 for the ssm sizes: head_dim / 2 wide heads,
  // n_head_kv key heads, twice as many value heads (Qwen3.5-4B's proportions).
  int full_attention_interval = 4;
  int ssm_conv_kernel = 4;
  int ssm_head_dim = 0;
  int ssm_k_heads = 0;
  int ssm_v_heads = 0;
  int rope_dims = 0;
  // gemma3 only: local layers attend to the last sliding_window positions
  // (0: every layer is global), all but every sliding_window_pattern-th
  // layer; they rope with rope_freq_base_local. final_logit_softcap: 0 none.
  int sliding_window = 8;
  int sliding_window_pattern = 3;
  float rope_freq_base_local = 10000.0f;
  float final_logit_softcap = 0.0f;
  // gemma4 (also uses the gemma3 fields above): local layers have heads
  // head_dim_local wide (0: half the global ones); global layers rope a
  // quarter of each head, through rope_freqs.weight; the last
  // shared_kv_layers layers reuse earlier layers' keys and values and, with
  // double_wide_ffn, have twice the FFN width; each layer gets an
  // n_embd_per_layer-wide per-layer input (0: none). Gemma 4 E2B's layout.
  int head_dim_local = 0;
  int shared_kv_layers = 2;
  int n_embd_per_layer = 32;
  bool double_wide_ffn = true;
  // minicpm only: MiniCPM's scalings (scale_emb, scale_depth, dim_model_base).
  float scale_emb = 12.0f;
  float scale_depth = 1.4f;
  int dim_model_base = 64;
  // Chat template: "" keeps the vocab's own (if any), "none" drops it,
  // anything else is the template text itself.
  std::string chat_template;
};

// Writes the model to `path` (atomically). Errors name the bad field.
Status write_test_model(const TestModelSpec& spec, const std::string& path);

// Parses a weight type name as used by TestModelSpec::type.
Result<int> parse_weight_type(const std::string& name);  // returns a ggml_type

}  // namespace graft

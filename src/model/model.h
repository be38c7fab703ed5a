// Model: a GGUF decoder model loaded for inference on ggml's CPU backend.
// Weights that ggml's CPU backend can multiply faster in a repacked layout
// are copied into such a buffer at load; the other multiplied matrices are
// copied into memory backed by huge pages (products over the file's 4 KiB
// mapped pages are slower); the rest (embeddings, norms) is used in place
// from a read-only memory map of the file. The mapped pages of every copy
// are released, so resident memory stays about the size of the file.
// One file per architecture family builds the graph (llama.cpp, qwen.cpp) on
// the shared helpers of model/layers.h.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <ggml-cpp.h>

#include "io/gguf_file.h"
#include "io/mmap.h"
#include "io/reserved_memory.h"
#include "model/lora.h"
#include "util/result.h"

namespace graft {

struct RopeConfig {
  int mode = 0;   // GGML_ROPE_TYPE_NORM (llama) or GGML_ROPE_TYPE_NEOX (qwen)
  int n_rot = 0;  // rotated dimensions of each head
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;  // 1 / linear scaling factor
  int n_ctx_orig = 0;       // context length the model was trained with
  std::string scaling;      // "", "linear" or "llama3" (per-dimension factors in rope_freqs.weight)
};

// The gated delta net of a linear-attention layer (qwen35): a short causal
// convolution over the q, k, v projection, then the gated delta rule with a
// state of head_dim x head_dim per value head.
struct SsmConfig {
  int conv_kernel = 0;  // ssm.conv_kernel: taps of the causal convolution
  int head_dim = 0;     // ssm.state_size: width of each k (and v) head
  int n_k_heads = 0;    // ssm.group_count
  int n_v_heads = 0;    // ssm.time_step_rank
  int inner = 0;        // ssm.inner_size: n_v_heads * head_dim

  int64_t key_dim() const { return int64_t(head_dim) * n_k_heads; }
  int64_t value_dim() const { return inner; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // channels of the convolution
  // Floats of one sequence's state in one layer.
  int64_t conv_state_size() const { return int64_t(conv_kernel - 1) * conv_dim(); }
  int64_t delta_state_size() const { return int64_t(head_dim) * head_dim * n_v_heads; }
};

struct ModelConfig {
  std::string arch;  // general.architecture
  std::string name;  // general.name
  int n_vocab = 0;
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_ff = 0;
  int n_ctx_train = 0;
  float rms_eps = 1e-5f;
  RopeConfig rope;
  bool tied_output = false;  // no output.weight: the token embedding is reused
  bool qkv_bias = false;     // qwen2: biases on q, k, v
  bool qk_norm = false;      // qwen3: RMS norms on each q and k head
  // qwen35: the q projection also yields a sigmoid gate on each head's
  // attention output (per head: head_dim q values, then head_dim gate values).
  bool attn_gate = false;
  // Hybrid models (qwen35): the layers that are gated delta-net (linear
  // attention) layers, with a recurrent state per sequence, instead of
  // attention over the KV cache. Empty: none.
  std::vector<bool> recurrent;
  SsmConfig ssm;
  // Sliding-window attention (gemma3): the layers flagged in `sliding` attend
  // only to the last `sliding_window` positions of their sequence (a row at
  // position p sees positions p - sliding_window + 1 .. p), with their own
  // rope (rope_local). Empty: every layer attends to the whole sequence.
  int sliding_window = 0;
  std::vector<bool> sliding;
  RopeConfig rope_local;
  // Scalings some families declare (1 or 0: none).
  float embd_scale = 1.0f;      // token embeddings x this (gemma3: sqrt(n_embd); minicpm: scale_emb)
  float kq_scale = 0.0f;        // attention scale; 0: 1 / sqrt(head_dim)
  float residual_scale = 1.0f;  // minicpm: each block's output x this before the residual add
  float logit_scale = 1.0f;     // minicpm: logits x this
  float logit_softcap = 0.0f;   // gemma: logits = softcap * tanh(logits / softcap); 0: none
  // Gemma 4: sliding layers have heads of their own width (head_dim is the
  // global layers'; n_head_kv the same for both); FFN widths may differ per
  // layer; the layers from kv_shared_from on store no keys or values of
  // their own but attend over those of the last earlier layer of their kind
  // (sliding or global); each layer adds a gated projection of its own
  // slice of per-layer token inputs (n_embd_per_layer wide, 0: none).
  int head_dim_local = 0;        // 0: head_dim
  std::vector<int> n_ff_layers;  // empty: n_ff everywhere
  int kv_shared_from = 0;        // 0: every layer has its own keys and values
  int n_embd_per_layer = 0;

  int n_embd_q() const { return n_head * head_dim; }
  int n_embd_kv() const { return n_head_kv * head_dim; }
  // Output width of the q projection (q and, with attn_gate, the gate).
  int n_embd_q_proj() const { return n_embd_q() * (attn_gate ? 2 : 1); }
  bool is_recurrent(int layer) const { return layer < int(recurrent.size()) && recurrent[size_t(layer)]; }
  bool is_sliding(int layer) const { return layer < int(sliding.size()) && sliding[size_t(layer)]; }
  bool has_sliding_layers() const { return sliding_window > 0; }
  int head_dim_of(int layer) const {
    return is_sliding(layer) && head_dim_local > 0 ? head_dim_local : head_dim;
  }
  int n_ff_of(int layer) const { return layer < int(n_ff_layers.size()) ? n_ff_layers[size_t(layer)] : n_ff; }
  // The layer whose KV cache `layer` attends over (itself unless shared).
  int kv_layer_of(int layer) const;
  // Whether `layer` stores keys and values of its own in the KV cache: an
  // attention layer that shares no earlier layer's.
  bool stores_kv(int layer) const { return !is_recurrent(layer) && kv_layer_of(layer) == layer; }
  // The width of one position's keys (or values) in `layer`'s cache.
  int n_embd_kv_of(int layer) const { return n_head_kv * head_dim_of(layer); }
  bool has_recurrent_layers() const;
  int n_recurrent_layers() const;
};

struct ModelLoadOptions {
  // Copy weights that ggml's CPU backend multiplies faster in a repacked
  // layout (e.g. Q4_0 on AVX2) into such a buffer, as llama.cpp does.
  bool repack = true;
  // Copy the other multiplied matrices into anonymous memory backed by huge
  // pages. Off: read them in place from the file's mapping, which processes
  // mapping the same file share through the page cache, at the cost of
  // slower products (4 KiB pages; 10-40 % on a 1B model's decode).
  bool copy_weights = true;
};

// The weights of one transformer block. Optional tensors are null.
struct LayerWeights {
  ggml_tensor* attn_norm = nullptr;
  ggml_tensor* wq = nullptr;
  ggml_tensor* wk = nullptr;
  ggml_tensor* wv = nullptr;
  ggml_tensor* wo = nullptr;
  ggml_tensor* bq = nullptr;
  ggml_tensor* bk = nullptr;
  ggml_tensor* bv = nullptr;
  ggml_tensor* q_norm = nullptr;
  ggml_tensor* k_norm = nullptr;
  ggml_tensor* ffn_norm = nullptr;
  ggml_tensor* ffn_gate = nullptr;
  ggml_tensor* ffn_up = nullptr;
  ggml_tensor* ffn_down = nullptr;
  ggml_tensor* bo = nullptr;              // minicpm: optional attn_output bias
  ggml_tensor* attn_post_norm = nullptr;  // gemma3: RMS norm of the attention output
  ggml_tensor* ffn_post_norm = nullptr;   // gemma3: RMS norm of the MLP output
  // gemma4: the per-layer input's gate (n_embd -> n_embd_per_layer), its
  // projection back (n_embd_per_layer -> n_embd) and that output's RMS norm,
  // and the scalar the layer's output is multiplied by.
  ggml_tensor* per_layer_gate = nullptr;
  ggml_tensor* per_layer_proj = nullptr;
  ggml_tensor* per_layer_post_norm = nullptr;
  ggml_tensor* out_scale = nullptr;
  // (qwen35 names ffn_norm post_attention_norm.)
  // Linear-attention (gated delta-net) layers:
  ggml_tensor* ssm_qkv = nullptr;    // attn_qkv: x -> the convolution's channels (q, k, v)
  ggml_tensor* ssm_gate = nullptr;   // attn_gate: x -> z, the output gate
  ggml_tensor* ssm_conv = nullptr;   // ssm_conv1d: [conv_kernel, conv_dim]
  ggml_tensor* ssm_dt = nullptr;     // ssm_dt.bias: [n_v_heads]
  ggml_tensor* ssm_a = nullptr;      // ssm_a: -exp(A_log) [n_v_heads]
  ggml_tensor* ssm_alpha = nullptr;  // x -> the decay's input [n_v_heads]
  ggml_tensor* ssm_beta = nullptr;   // x -> the write strength's input [n_v_heads]
  ggml_tensor* ssm_norm = nullptr;   // RMS norm weight of each output head [head_dim]
  ggml_tensor* ssm_out = nullptr;    // [inner, n_embd]
};

struct ModelWeights {
  ggml_tensor* tok_embd = nullptr;
  ggml_tensor* output_norm = nullptr;
  ggml_tensor* output = nullptr;      // tok_embd itself (or its repacked copy) when tied
  ggml_tensor* rope_freqs = nullptr;  // llama3 rope scaling; gemma4: the global layers' partial rope
  // gemma4's per-layer token inputs: an embedding [n_embd_per_layer * n_layer,
  // n_vocab], a projection of the scaled token embedding to the same width
  // and the RMS norm of each layer's slice of that projection.
  ggml_tensor* per_layer_tok_embd = nullptr;
  ggml_tensor* per_layer_model_proj = nullptr;
  ggml_tensor* per_layer_proj_norm = nullptr;
  std::vector<LayerWeights> layers;
};

struct GraphContext;
struct Architecture;

class Model {
 public:
  // Loads a GGUF model. Errors name the file and the missing key or tensor,
  // the wrong shape, or the unsupported architecture or tensor type.
  static Result<std::unique_ptr<Model>> load(const std::string& path, const ModelLoadOptions& options = {});
  // The same model's config and weight tensors (shapes, types, mapped or
  // repacked) without reading or mapping any weight data: for building
  // graphs to measure (fit/), never to compute. weight_bytes() and
  // repacked_bytes() are what load() would report.
  static Result<std::unique_ptr<Model>> load_layout(const std::string& path,
                                                    const ModelLoadOptions& options = {});

  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return config_; }
  const GgufFile& gguf() const { return gguf_; }
  const ModelWeights& weights() const { return weights_; }
  // Bytes of weight data (mapped plus repacked).
  size_t weight_bytes() const { return weight_bytes_; }
  // Bytes of weights copied into repacked buffers (their mapped pages are released).
  size_t repacked_bytes() const { return repacked_bytes_; }
  // Bytes of weights copied as they are into huge-page memory (their mapped
  // pages are released).
  size_t copied_bytes() const { return copied_bytes_; }
  // Seconds spent in load().
  double load_seconds() const { return load_seconds_; }

  // Appends the forward graph of one batch (see model/graph.h) and returns
  // the logits tensor [n_vocab, n_outputs].
  ggml_tensor* build_graph(GraphContext& g) const;

  // LoRA adapters (model/lora.h). Called only while no forward runs.
  Result<int> mount_lora(const LoraWeights& weights) { return lora_.mount(weights); }
  Status unmount_lora(int slot) { return lora_.unmount(slot); }
  const LoraSet& lora() const { return lora_; }

 private:
  Model(GgufFile gguf, MappedFile file, const ModelLoadOptions& options);
  static Result<std::unique_ptr<Model>> open(const std::string& path, const ModelLoadOptions& options,
                                             bool layout_only);
  Status load_weights(const ModelLoadOptions& options, bool layout_only);

  GgufFile gguf_;
  MappedFile file_;
  ModelConfig config_;
  const Architecture* arch_ = nullptr;
  ModelWeights weights_;
  ggml_context_ptr tensor_ctx_;
  std::vector<ReservedMemory> memory_;            // the copies' memory (outlives buffers_)
  std::vector<ggml_backend_buffer_ptr> buffers_;  // over file_, the copies and the repacked copies
  size_t weight_bytes_ = 0;
  size_t repacked_bytes_ = 0;
  size_t copied_bytes_ = 0;
  double load_seconds_ = 0.0;
  LoraSet lora_;
};

}  // namespace graft

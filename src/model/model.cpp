#include "model/model.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <ggml-alloc.h>
#include <ggml-cpu.h>

#include "model/arch.h"
#include "model/graph.h"
#include "model/weights_loader.h"
#include "util/log.h"

namespace graft {

namespace {

Result<int> require_int(const GgufFile& f, const std::string& key) {
  auto v = f.get_int(key);
  if (!v) return errorf("invalid_model", "{}: missing or invalid metadata key '{}'", f.path(), key);
  if (*v <= 0 || *v > (int64_t(1) << 30))
    return errorf("invalid_model", "{}: bad value {} for '{}'", f.path(), *v, key);
  return int(*v);
}

Result<ModelConfig> read_config(const GgufFile& f, const Architecture& arch) {
  ModelConfig c;
  c.arch = arch.name;
  c.name = f.find_string("general.name").value_or("");
  const std::string a = c.arch + ".";
  GRAFT_TRY(c.n_embd, require_int(f, a + "embedding_length"));
  GRAFT_TRY(c.n_layer, require_int(f, a + "block_count"));
  GRAFT_TRY(c.n_head, require_int(f, a + "attention.head_count"));
  if (auto widths = f.get_int_array(a + "feed_forward_length"); widths && arch.read_config) {
    // Per-layer widths (gemma4): the family's reader checks them; n_ff is the widest.
    for (int64_t w : *widths) c.n_ff = std::max(c.n_ff, int(std::clamp<int64_t>(w, 0, int64_t(1) << 30)));
    if (c.n_ff <= 0)
      return errorf("invalid_model", "{}: bad values for '{}feed_forward_length'", f.path(), a);
  } else {
    GRAFT_TRY(c.n_ff, require_int(f, a + "feed_forward_length"));
  }
  GRAFT_TRY(c.n_ctx_train, require_int(f, a + "context_length"));
  c.n_head_kv = int(f.find_int(a + "attention.head_count_kv").value_or(c.n_head));
  c.head_dim = int(f.find_int(a + "attention.key_length").value_or(c.n_embd / c.n_head));
  const int v_dim = int(f.find_int(a + "attention.value_length").value_or(c.head_dim));
  if (v_dim != c.head_dim) {
    return errorf("invalid_model",
                  "{}: key and value head widths differ ({} vs {}), which graft does not support", f.path(),
                  c.head_dim, v_dim);
  }
  if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0) {
    return errorf("invalid_model", "{}: head_count ({}) is not a multiple of head_count_kv ({})", f.path(),
                  c.n_head, c.n_head_kv);
  }
  auto eps = f.get_float(a + "attention.layer_norm_rms_epsilon");
  if (!eps)
    return errorf("invalid_model", "{}: missing metadata key '{}attention.layer_norm_rms_epsilon'", f.path(),
                  a);
  c.rms_eps = float(*eps);

  RopeConfig& r = c.rope;
  r.mode = arch.rope_mode;
  r.n_rot = int(f.find_int(a + "rope.dimension_count").value_or(c.head_dim));
  // (A family with its own config reader checks partial rope itself.)
  if (r.n_rot != c.head_dim && !arch.read_config) {
    return errorf("invalid_model", "{}: partial rope ({} of {} dims) is not supported", f.path(), r.n_rot,
                  c.head_dim);
  }
  r.freq_base = float(f.find_float(a + "rope.freq_base").value_or(10000.0));
  auto factor = f.find_float(a + "rope.scaling.factor");
  if (!factor) factor = f.find_float(a + "rope.scale_linear");
  r.freq_scale = (factor && *factor != 0.0) ? float(1.0 / *factor) : 1.0f;
  r.scaling = f.find_string(a + "rope.scaling.type").value_or("");
  if (r.scaling == "none") r.scaling = "";
  if (!r.scaling.empty() && r.scaling != "linear") {
    return errorf("invalid_model",
                  "{}: rope scaling '{}' is not supported (linear, or llama3 frequency factors)", f.path(),
                  r.scaling);
  }
  r.n_ctx_orig = int(f.find_int(a + "rope.scaling.original_context_length").value_or(c.n_ctx_train));
  c.qkv_bias = arch.qkv_bias;
  c.qk_norm = arch.qk_norm;
  if (arch.read_config) GRAFT_TRY_STATUS(arch.read_config(f, c));
  return c;
}

// ggml's own messages (e.g. one line per repacked tensor) go to graft's log at debug level.
void route_ggml_log() {
  static const bool once = [] {
    ggml_log_set(
        [](ggml_log_level level, const char* text, void*) {
          std::string line(text);
          while (!line.empty() && line.back() == '\n') line.pop_back();
          if (line.empty()) return;
          if (level == GGML_LOG_LEVEL_ERROR) {
            GRAFT_LOG_ERROR("ggml: {}", line);
          } else if (level == GGML_LOG_LEVEL_WARN) {
            GRAFT_LOG_WARN("ggml: {}", line);
          } else {
            GRAFT_LOG_DEBUG("ggml: {}", line);
          }
        },
        nullptr);
    return true;
  }();
  (void)once;
}

}  // namespace

Model::Model(GgufFile gguf, MappedFile file, const ModelLoadOptions&)
    : gguf_(std::move(gguf)), file_(std::move(file)) {}

Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::load(const std::string& path, const ModelLoadOptions& options) {
  return open(path, options, /*layout_only=*/false);
}

Result<std::unique_ptr<Model>> Model::load_layout(const std::string& path, const ModelLoadOptions& options) {
  return open(path, options, /*layout_only=*/true);
}

Result<std::unique_ptr<Model>> Model::open(const std::string& path, const ModelLoadOptions& options,
                                           bool layout_only) {
  const auto start = std::chrono::steady_clock::now();
  route_ggml_log();
  GRAFT_TRY(GgufFile gguf, GgufFile::open(path));
  auto arch_name = gguf.find_string("general.architecture");
  if (!arch_name) return errorf("invalid_model", "{}: missing metadata key 'general.architecture'", path);
  const Architecture* arch = find_architecture(*arch_name);
  if (!arch) {
    return errorf("unsupported_model", "{}: unsupported architecture '{}' (graft runs {})", path, *arch_name,
                  supported_architectures());
  }
  GRAFT_TRY(ModelConfig config, read_config(gguf, *arch));
  MappedFile file;
  if (!layout_only) {
    GRAFT_TRY(file, MappedFile::open(path));
  }
  std::unique_ptr<Model> model(new Model(std::move(gguf), std::move(file), options));
  model->config_ = std::move(config);
  model->arch_ = arch;
  GRAFT_TRY_STATUS(model->load_weights(options, layout_only));
  model->lora_.init(model->config_);
  model->load_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return model;
}

Status Model::load_weights(const ModelLoadOptions& options, bool layout_only) {
  WeightsLoader loader(gguf_, file_, config_, options);
  ModelConfig& c = config_;
  const int64_t n_embd = c.n_embd, n_q = c.n_embd_q(), n_kv = c.n_embd_kv(), n_ff = c.n_ff;
  GRAFT_TRY(weights_.tok_embd, loader.input("token_embd.weight", {n_embd, -1}));
  c.n_vocab = int(weights_.tok_embd->ne[1]);
  const int64_t n_vocab = c.n_vocab;
  GRAFT_TRY(weights_.output_norm, loader.vector("output_norm.weight", n_embd));
  if (gguf_.find_tensor("output.weight")) {
    GRAFT_TRY(weights_.output, loader.matrix("output.weight", {n_embd, n_vocab}));
  } else {
    c.tied_output = true;
    GRAFT_TRY(weights_.output, loader.matrix_copy_of(weights_.tok_embd, "token_embd.weight"));
  }
  if (gguf_.find_tensor("rope_freqs.weight")) {
    GRAFT_TRY(weights_.rope_freqs, loader.vector("rope_freqs.weight", c.rope.n_rot / 2));
    c.rope.scaling = "llama3";
  }
  weights_.layers.resize(size_t(c.n_layer));
  for (int il = 0; il < c.n_layer; ++il) {
    LayerWeights& l = weights_.layers[size_t(il)];
    if (arch_->load_layer) {
      GRAFT_TRY_STATUS(arch_->load_layer(loader, c, il, l));
      continue;
    }
    const std::string p = "blk." + std::to_string(il) + ".";
    GRAFT_TRY(l.attn_norm, loader.vector(p + "attn_norm.weight", n_embd));
    GRAFT_TRY(l.wq, loader.matrix(p + "attn_q.weight", {n_embd, n_q}));
    GRAFT_TRY(l.wk, loader.matrix(p + "attn_k.weight", {n_embd, n_kv}));
    GRAFT_TRY(l.wv, loader.matrix(p + "attn_v.weight", {n_embd, n_kv}));
    GRAFT_TRY(l.wo, loader.matrix(p + "attn_output.weight", {n_q, n_embd}));
    if (c.qkv_bias) {
      GRAFT_TRY(l.bq, loader.vector(p + "attn_q.bias", n_q));
      GRAFT_TRY(l.bk, loader.vector(p + "attn_k.bias", n_kv));
      GRAFT_TRY(l.bv, loader.vector(p + "attn_v.bias", n_kv));
    }
    if (c.qk_norm) {
      GRAFT_TRY(l.q_norm, loader.vector(p + "attn_q_norm.weight", c.head_dim));
      GRAFT_TRY(l.k_norm, loader.vector(p + "attn_k_norm.weight", c.head_dim));
    }
    GRAFT_TRY(l.ffn_norm, loader.vector(p + "ffn_norm.weight", n_embd));
    GRAFT_TRY(l.ffn_gate, loader.matrix(p + "ffn_gate.weight", {n_embd, n_ff}));
    GRAFT_TRY(l.ffn_up, loader.matrix(p + "ffn_up.weight", {n_embd, n_ff}));
    GRAFT_TRY(l.ffn_down, loader.matrix(p + "ffn_down.weight", {n_ff, n_embd}));
  }
  if (arch_->load_weights) GRAFT_TRY_STATUS(arch_->load_weights(loader, c, weights_));
  GRAFT_TRY(LoadedWeights loaded, layout_only ? loader.finish_layout() : loader.finish());
  tensor_ctx_ = std::move(loaded.ctx);
  memory_ = std::move(loaded.memory);
  buffers_ = std::move(loaded.buffers);
  weight_bytes_ = loaded.weight_bytes;
  repacked_bytes_ = loaded.repacked_bytes;
  copied_bytes_ = loaded.copied_bytes;
  return {};
}

int ModelConfig::kv_layer_of(int layer) const {
  if (kv_shared_from <= 0 || layer < kv_shared_from) return layer;
  for (int il = kv_shared_from - 1; il >= 0; --il) {
    if (is_sliding(il) == is_sliding(layer)) return il;
  }
  return layer;
}

bool ModelConfig::has_recurrent_layers() const {
  return n_recurrent_layers() > 0;
}

int ModelConfig::n_recurrent_layers() const {
  return int(std::count(recurrent.begin(), recurrent.end(), true));
}

ggml_tensor* Model::build_graph(GraphContext& g) const {
  return arch_->build(g, *this);
}

}  // namespace graft

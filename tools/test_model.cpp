#include "test_model.h"

#include <ggml-cpp.h>
#include <ggml.h>
#include <gguf.h>

#include <unistd.h>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <regex>
#include <vector>

#include "io/gguf_file.h"
#include "tools/random.h"

namespace graft {

namespace {

struct TypeName {
  const char* name;
  ggml_type type;
  int file_type;  // general.file_type as llama.cpp numbers it
};

constexpr TypeName kTypes[] = {
    {"f32", GGML_TYPE_F32, 0},    {"f16", GGML_TYPE_F16, 1},    {"bf16", GGML_TYPE_BF16, 32},
    {"q8_0", GGML_TYPE_Q8_0, 7},  {"q4_0", GGML_TYPE_Q4_0, 2},  {"q4_1", GGML_TYPE_Q4_1, 3},
    {"q4_k", GGML_TYPE_Q4_K, 15}, {"q5_k", GGML_TYPE_Q5_K, 17}, {"q6_k", GGML_TYPE_Q6_K, 18},
};

const TypeName* find_type(const std::string& name) {
  for (const auto& t : kTypes) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

// One tensor of the model: its shape and how to fill it.
struct TensorPlan {
  std::string name;
  std::vector<int64_t> ne;
  ggml_type type;
  std::function<void(std::vector<float>&)> fill;
};

// Tokens kept at full output weight: plain ASCII words that start with a
// space (the BPE or SentencePiece space marker) and a little punctuation.
// Everything else is scaled down so greedy text from a random model reads as
// space-separated words.
bool is_readable_token(const std::string& piece) {
  static const std::regex word("^(\xC4\xA0|\xE2\x96\x81)[A-Za-z]+$");
  static const std::regex punct("^[.,!?]$");
  return std::regex_match(piece, word) || std::regex_match(piece, punct);
}

void fill_uniform(std::vector<float>& data, uint64_t seed, float stddev) {
  SplitMix64 rng(seed);
  const float half_width = stddev * std::sqrt(3.0f);
  for (float& x : data) x = (rng.next_float() * 2.0f - 1.0f) * half_width;
}

void fill_around_one(std::vector<float>& data, uint64_t seed) {
  SplitMix64 rng(seed);
  for (float& x : data) x = 1.0f + (rng.next_float() - 0.5f) * 0.2f;
}

uint64_t name_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return SplitMix64(h).next();
}

// qwen35's linear-attention sizes, defaults filled in.
struct SsmShape {
  int head_dim, k_heads, v_heads;
  int64_t key_dim() const { return int64_t(head_dim) * k_heads; }
  int64_t value_dim() const { return int64_t(head_dim) * v_heads; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
};

SsmShape ssm_shape(const TestModelSpec& s, int head_dim) {
  SsmShape shape{s.ssm_head_dim > 0 ? s.ssm_head_dim : head_dim / 2,
                 s.ssm_k_heads > 0 ? s.ssm_k_heads : s.n_head_kv, 0};
  shape.v_heads = s.ssm_v_heads > 0 ? s.ssm_v_heads : 2 * shape.k_heads;
  return shape;
}

Status check_spec(const TestModelSpec& s) {
  if (s.arch != "llama" && s.arch != "qwen2" && s.arch != "qwen3" && s.arch != "qwen35" &&
      s.arch != "gemma3" && s.arch != "gemma4" && s.arch != "minicpm") {
    return errorf("invalid_argument",
                  "unsupported architecture '{}' (llama, qwen2, qwen3, qwen35, gemma3, gemma4, minicpm)",
                  s.arch);
  }
  if (s.arch == "gemma4") {
    const int head_dim = s.head_dim > 0 ? s.head_dim : (s.n_head > 0 ? s.n_embd / s.n_head : 0);
    const int local = s.head_dim_local > 0 ? s.head_dim_local : head_dim / 2;
    const int period = s.sliding_window_pattern;
    const int kv_from = s.n_layer - s.shared_kv_layers;
    if (s.sliding_window <= 0 || period < 2 || local <= 0 || local > head_dim || head_dim % 8 != 0 ||
        s.n_embd_per_layer < 0) {
      return errorf("invalid_argument",
                    "gemma4 needs a sliding window, a pattern of 2 or more, local heads no wider than the "
                    "global ones and global heads a multiple of 8 wide");
    }
    // llama.cpp shares the global layer just before the shared ones and the local one before that.
    if (s.shared_kv_layers < 0 ||
        (s.shared_kv_layers > 0 && (kv_from < 2 || kv_from % period != 0 || period < 2))) {
      return errorf(
          "invalid_argument",
          "gemma4's shared-KV layers must start right after a global layer (a multiple of the pattern)");
    }
  }
  if (s.arch == "minicpm" && (!(s.scale_emb > 0) || !(s.scale_depth > 0) || s.dim_model_base <= 0)) {
    return errorf("invalid_argument", "minicpm needs positive scale_emb, scale_depth and dim_model_base");
  }
  if (s.arch == "gemma3" &&
      (s.sliding_window < 0 || s.sliding_window_pattern < 0 || s.final_logit_softcap < 0)) {
    return errorf("invalid_argument", "gemma3 needs a sliding window, pattern and softcap of 0 or more");
  }
  if (s.arch == "qwen35") {
    const int head_dim = s.head_dim > 0 ? s.head_dim : (s.n_head > 0 ? s.n_embd / s.n_head : 0);
    const SsmShape ssm = ssm_shape(s, head_dim);
    if (s.full_attention_interval <= 0 || s.ssm_conv_kernel < 2 || ssm.head_dim <= 0 || ssm.k_heads <= 0 ||
        ssm.v_heads % ssm.k_heads != 0) {
      return errorf(
          "invalid_argument",
          "qwen35 needs full_attention_interval >= 1, a conv kernel of >= 2 taps, and value heads a "
          "multiple of key heads");
    }
    const int rope_dims = s.rope_dims > 0 ? s.rope_dims : head_dim / 4;
    if (rope_dims <= 0 || rope_dims % 2 != 0 || rope_dims > head_dim) {
      return errorf("invalid_argument", "rope over {} of {} dimensions", rope_dims, head_dim);
    }
    if (!s.rope_scaling.empty()) return errorf("invalid_argument", "qwen35 test models have no rope scaling");
  }
  if (!find_type(s.type)) return errorf("invalid_argument", "unsupported weight type '{}'", s.type);
  if (s.n_embd <= 0 || s.n_layer <= 0 || s.n_head <= 0 || s.n_head_kv <= 0 || s.n_ff <= 0 || s.n_ctx <= 0) {
    return errorf("invalid_argument", "every dimension must be positive");
  }
  if (s.n_head % s.n_head_kv != 0) {
    return errorf("invalid_argument", "n_head ({}) must be a multiple of n_head_kv ({})", s.n_head,
                  s.n_head_kv);
  }
  if (s.head_dim == 0 && s.n_embd % s.n_head != 0) {
    return errorf("invalid_argument", "n_embd ({}) must be a multiple of n_head ({})", s.n_embd, s.n_head);
  }
  if (!s.rope_scaling.empty() && s.rope_scaling != "linear" && s.rope_scaling != "llama3") {
    return errorf("invalid_argument", "unknown rope scaling '{}' (linear, llama3)", s.rope_scaling);
  }
  return {};
}

}  // namespace

Result<int> parse_weight_type(const std::string& name) {
  const TypeName* t = find_type(name);
  if (!t) return errorf("invalid_argument", "unsupported weight type '{}'", name);
  return static_cast<int>(t->type);
}

Status write_test_model(const TestModelSpec& spec, const std::string& path) {
  GRAFT_TRY_STATUS(check_spec(spec));
  GRAFT_TRY(GgufFile vocab, GgufFile::open(spec.vocab_path));
  GRAFT_TRY(std::vector<std::string> tokens, vocab.get_string_array("tokenizer.ggml.tokens"));
  const int64_t n_vocab = static_cast<int64_t>(tokens.size());
  const TypeName* wtype = find_type(spec.type);
  const int head_dim = spec.head_dim > 0 ? spec.head_dim : spec.n_embd / spec.n_head;
  const int64_t block = ggml_blck_size(wtype->type);
  const bool hybrid = spec.arch == "qwen35";
  const SsmShape ssm = ssm_shape(spec, head_dim);
  const int gemma4_local = spec.head_dim_local > 0 ? spec.head_dim_local : head_dim / 2;
  for (int64_t width : {int64_t(spec.n_embd), int64_t(spec.n_ff), int64_t(spec.n_head) * head_dim,
                        hybrid ? ssm.value_dim() : int64_t(spec.n_embd),
                        spec.arch == "gemma4" ? int64_t(spec.n_head) * gemma4_local : int64_t(spec.n_embd),
                        spec.arch == "gemma4" && spec.n_embd_per_layer > 0 ? int64_t(spec.n_embd_per_layer)
                                                                           : int64_t(spec.n_embd)}) {
    if (width % block != 0) {
      return errorf("invalid_argument", "type {} needs row widths that are multiples of {}, got {}",
                    spec.type, block, width);
    }
  }

  // Metadata: the vocab's tokenizer.* keys, then the architecture's own.
  gguf_context_ptr meta(gguf_init_empty());
  gguf_set_kv(meta.get(), vocab.raw());
  for (const std::string& key : vocab.keys()) {
    if (key.rfind("tokenizer.", 0) != 0) gguf_remove_key(meta.get(), key.c_str());
  }
  if (spec.chat_template == "none") {
    gguf_remove_key(meta.get(), "tokenizer.chat_template");
  } else if (!spec.chat_template.empty()) {
    gguf_set_val_str(meta.get(), "tokenizer.chat_template", spec.chat_template.c_str());
  }
  const std::string a = spec.arch;
  auto key = [&](const char* suffix) { return a + "." + suffix; };
  gguf_set_val_str(meta.get(), "general.architecture", a.c_str());
  gguf_set_val_str(meta.get(), "general.name", spec.name.c_str());
  gguf_set_val_u32(meta.get(), "general.file_type", static_cast<uint32_t>(wtype->file_type));
  gguf_set_val_u32(meta.get(), "general.quantization_version", GGML_QNT_VERSION);
  gguf_set_val_u32(meta.get(), key("vocab_size").c_str(), static_cast<uint32_t>(n_vocab));
  gguf_set_val_u32(meta.get(), key("context_length").c_str(), static_cast<uint32_t>(spec.n_ctx));
  gguf_set_val_u32(meta.get(), key("embedding_length").c_str(), static_cast<uint32_t>(spec.n_embd));
  gguf_set_val_u32(meta.get(), key("block_count").c_str(), static_cast<uint32_t>(spec.n_layer));
  gguf_set_val_u32(meta.get(), key("feed_forward_length").c_str(), static_cast<uint32_t>(spec.n_ff));
  gguf_set_val_u32(meta.get(), key("attention.head_count").c_str(), static_cast<uint32_t>(spec.n_head));
  gguf_set_val_u32(meta.get(), key("attention.head_count_kv").c_str(), static_cast<uint32_t>(spec.n_head_kv));
  gguf_set_val_u32(meta.get(), key("attention.key_length").c_str(), static_cast<uint32_t>(head_dim));
  gguf_set_val_u32(meta.get(), key("attention.value_length").c_str(), static_cast<uint32_t>(head_dim));
  gguf_set_val_f32(meta.get(), key("attention.layer_norm_rms_epsilon").c_str(), spec.rms_eps);
  gguf_set_val_f32(meta.get(), key("rope.freq_base").c_str(), spec.rope_freq_base);
  const int rope_dims =
      hybrid && spec.rope_dims == 0 ? head_dim / 4 : (spec.rope_dims > 0 ? spec.rope_dims : head_dim);
  gguf_set_val_u32(meta.get(), key("rope.dimension_count").c_str(), static_cast<uint32_t>(rope_dims));
  if (hybrid) {
    // Interleaved multi-axis rope: the rotated pairs split over three axes, as Qwen3.5's [11, 11, 10].
    const int pairs = rope_dims / 2;
    const int32_t sections[4] = {(pairs + 2) / 3, (pairs + 1) / 3, pairs / 3, 0};
    gguf_set_arr_data(meta.get(), key("rope.dimension_sections").c_str(), GGUF_TYPE_INT32, sections, 4);
    gguf_set_val_u32(meta.get(), key("ssm.conv_kernel").c_str(), static_cast<uint32_t>(spec.ssm_conv_kernel));
    gguf_set_val_u32(meta.get(), key("ssm.state_size").c_str(), static_cast<uint32_t>(ssm.head_dim));
    gguf_set_val_u32(meta.get(), key("ssm.group_count").c_str(), static_cast<uint32_t>(ssm.k_heads));
    gguf_set_val_u32(meta.get(), key("ssm.time_step_rank").c_str(), static_cast<uint32_t>(ssm.v_heads));
    gguf_set_val_u32(meta.get(), key("ssm.inner_size").c_str(), static_cast<uint32_t>(ssm.value_dim()));
    gguf_set_val_u32(meta.get(), key("full_attention_interval").c_str(),
                     static_cast<uint32_t>(spec.full_attention_interval));
  }
  const bool gemma3 = spec.arch == "gemma3";
  if (gemma3) {
    if (spec.sliding_window > 0) {
      gguf_set_val_u32(meta.get(), key("attention.sliding_window").c_str(),
                       static_cast<uint32_t>(spec.sliding_window));
      gguf_set_val_u32(meta.get(), key("attention.sliding_window_pattern").c_str(),
                       static_cast<uint32_t>(spec.sliding_window_pattern));
      gguf_set_val_f32(meta.get(), key("rope.freq_base_swa").c_str(), spec.rope_freq_base_local);
    }
    if (spec.final_logit_softcap > 0.0f) {
      gguf_set_val_f32(meta.get(), key("final_logit_softcapping").c_str(), spec.final_logit_softcap);
    }
  }
  const bool gemma4 = spec.arch == "gemma4";
  const int head_dim_local = gemma4_local;
  const int kv_from = spec.n_layer - spec.shared_kv_layers;
  auto is_local = [&](int l) { return (l + 1) % spec.sliding_window_pattern != 0; };
  auto layer_ff = [&](int l) {
    return gemma4 && spec.double_wide_ffn && l >= kv_from ? 2 * spec.n_ff : spec.n_ff;
  };
  const int64_t n_pl = gemma4 ? spec.n_embd_per_layer : 0;
  if (gemma4) {
    gguf_set_val_u32(meta.get(), key("attention.sliding_window").c_str(),
                     static_cast<uint32_t>(spec.sliding_window));
    std::vector<int8_t> local(size_t(spec.n_layer));
    for (int l = 0; l < spec.n_layer; ++l) local[size_t(l)] = is_local(l) ? 1 : 0;
    gguf_set_arr_data(meta.get(), key("attention.sliding_window_pattern").c_str(), GGUF_TYPE_BOOL,
                      local.data(), local.size());
    gguf_set_val_f32(meta.get(), key("rope.freq_base_swa").c_str(), spec.rope_freq_base_local);
    gguf_set_val_u32(meta.get(), key("attention.key_length_swa").c_str(),
                     static_cast<uint32_t>(head_dim_local));
    gguf_set_val_u32(meta.get(), key("attention.value_length_swa").c_str(),
                     static_cast<uint32_t>(head_dim_local));
    gguf_set_val_u32(meta.get(), key("rope.dimension_count_swa").c_str(),
                     static_cast<uint32_t>(head_dim_local));
    gguf_set_val_u32(meta.get(), key("attention.shared_kv_layers").c_str(),
                     static_cast<uint32_t>(spec.shared_kv_layers));
    gguf_set_val_u32(meta.get(), key("embedding_length_per_layer_input").c_str(),
                     static_cast<uint32_t>(n_pl));
    if (spec.final_logit_softcap > 0.0f) {
      gguf_set_val_f32(meta.get(), key("final_logit_softcapping").c_str(), spec.final_logit_softcap);
    }
    if (spec.double_wide_ffn && spec.shared_kv_layers > 0) {
      std::vector<int32_t> widths(size_t(spec.n_layer));
      for (int l = 0; l < spec.n_layer; ++l) widths[size_t(l)] = layer_ff(l);
      gguf_set_arr_data(meta.get(), key("feed_forward_length").c_str(), GGUF_TYPE_INT32, widths.data(),
                        widths.size());
    }
  }
  const bool minicpm = spec.arch == "minicpm";
  // minicpm divides its logits by this; the output rows are scaled up to match.
  const float minicpm_logit_scale = minicpm ? float(spec.n_embd) / float(spec.dim_model_base) : 1.0f;
  if (minicpm) {
    gguf_set_val_f32(meta.get(), key("embedding_scale").c_str(), spec.scale_emb);
    gguf_set_val_f32(meta.get(), key("residual_scale").c_str(),
                     spec.scale_depth / std::sqrt(float(spec.n_layer)));
    gguf_set_val_f32(meta.get(), key("logit_scale").c_str(), minicpm_logit_scale);
  }
  if (spec.rope_scaling == "linear") {
    gguf_set_val_str(meta.get(), key("rope.scaling.type").c_str(), "linear");
    gguf_set_val_f32(meta.get(), key("rope.scaling.factor").c_str(), spec.rope_scaling_factor);
  }

  // Tensors, in llama.cpp's naming.
  const uint64_t seed = spec.seed;
  std::vector<TensorPlan> plan;
  auto matrix = [&](const std::string& name, int64_t in, int64_t out, float stddev) {
    plan.push_back({name, {in, out}, wtype->type, [=](std::vector<float>& d) {
                      fill_uniform(d, name_seed(seed, name), stddev);
                    }});
  };
  auto norm = [&](const std::string& name, int64_t n) {
    plan.push_back({name, {n}, GGML_TYPE_F32, [=](std::vector<float>& d) {
                      fill_around_one(d, name_seed(seed, name));
                    }});
  };
  auto bias = [&](const std::string& name, int64_t n) {
    plan.push_back({name, {n}, GGML_TYPE_F32, [=](std::vector<float>& d) {
                      fill_uniform(d, name_seed(seed, name), 0.1f);
                    }});
  };

  std::vector<bool> readable(static_cast<size_t>(n_vocab));
  for (int64_t i = 0; i < n_vocab; ++i) readable[size_t(i)] = is_readable_token(tokens[size_t(i)]);
  const float unreadable = spec.unreadable_scale;
  // Output rows: logits of readable tokens get standard deviation logit_scale
  // (the final hidden state has unit RMS after its norm).
  const float out_std = spec.logit_scale / std::sqrt(float(spec.n_embd)) * minicpm_logit_scale;
  auto output_fill = [=](const std::string& name) {
    return [=](std::vector<float>& d) {
      fill_uniform(d, name_seed(seed, name), out_std);
      for (int64_t t = 0; t < n_vocab; ++t) {
        if (readable[size_t(t)]) continue;
        for (int64_t j = 0; j < spec.n_embd; ++j) d[size_t(t * spec.n_embd + j)] *= unreadable;
      }
    };
  };
  plan.push_back({"token_embd.weight",
                  {spec.n_embd, n_vocab},
                  wtype->type,
                  spec.tied_output ? output_fill("token_embd.weight")
                                   : std::function<void(std::vector<float>&)>([=](std::vector<float>& d) {
                                       fill_uniform(d, name_seed(seed, "token_embd.weight"), 1.0f);
                                     })});
  norm("output_norm.weight", spec.n_embd);
  if (!spec.tied_output) {
    plan.push_back({"output.weight", {spec.n_embd, n_vocab}, wtype->type, output_fill("output.weight")});
  }
  if (spec.rope_scaling == "llama3") {
    // Per-dimension frequency divisors, as Llama 3.1 GGUFs carry them.
    const int orig = spec.rope_orig_ctx > 0 ? spec.rope_orig_ctx : 8192;
    const float factor = spec.rope_scaling_factor > 1.0f ? spec.rope_scaling_factor : 8.0f;
    const float base = spec.rope_freq_base;
    plan.push_back({"rope_freqs.weight", {head_dim / 2}, GGML_TYPE_F32, [=](std::vector<float>& d) {
                      const float low_wavelen = orig / 1.0f, high_wavelen = orig / 4.0f;
                      for (int i = 0; i < head_dim / 2; ++i) {
                        float freq = 1.0f / std::pow(base, 2.0f * i / head_dim);
                        float wavelen = 2.0f * float(M_PI) / freq;
                        if (wavelen < high_wavelen) {
                          d[size_t(i)] = 1.0f;
                        } else if (wavelen > low_wavelen) {
                          d[size_t(i)] = factor;
                        } else {
                          float smooth = (orig / wavelen - 1.0f) / (4.0f - 1.0f);
                          d[size_t(i)] = 1.0f / ((1.0f - smooth) / factor + smooth);
                        }
                      }
                    }});
  }
  if (gemma4) {
    // Gemma 4's proportional rope on the global layers: a quarter of each
    // head rotates, the rest is stopped by huge frequency divisors.
    const int pairs = head_dim / 2, rotated = head_dim / 8;
    plan.push_back({"rope_freqs.weight", {pairs}, GGML_TYPE_F32, [=](std::vector<float>& d) {
                      for (int i = 0; i < pairs; ++i) d[size_t(i)] = i < rotated ? 1.0f : 1e30f;
                    }});
    if (n_pl > 0) {
      plan.push_back({"per_layer_token_embd.weight",
                      {n_pl * spec.n_layer, n_vocab},
                      wtype->type,
                      [=](std::vector<float>& d) {
                        fill_uniform(d, name_seed(seed, "per_layer_token_embd.weight"), 1.0f);
                      }});
      matrix("per_layer_model_proj.weight", spec.n_embd, n_pl * spec.n_layer,
             1.0f / std::sqrt(float(spec.n_embd)));
      norm("per_layer_proj_norm.weight", n_pl);
    }
  }
  for (int l = 0; l < spec.n_layer && gemma4; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const int64_t hd = is_local(l) ? head_dim_local : head_dim;
    const int64_t qw = int64_t(spec.n_head) * hd, kvw = int64_t(spec.n_head_kv) * hd;
    const int64_t ff = layer_ff(l);
    const float in_std = 1.0f / std::sqrt(float(spec.n_embd));
    norm(p + "attn_norm.weight", spec.n_embd);
    matrix(p + "attn_q.weight", spec.n_embd, qw, in_std);
    norm(p + "attn_q_norm.weight", hd);
    if (l < kv_from) {
      matrix(p + "attn_k.weight", spec.n_embd, kvw, in_std);
      matrix(p + "attn_v.weight", spec.n_embd, kvw, in_std);
      norm(p + "attn_k_norm.weight", hd);
    }
    matrix(p + "attn_output.weight", qw, spec.n_embd, 1.0f / std::sqrt(float(qw)));
    norm(p + "post_attention_norm.weight", spec.n_embd);
    norm(p + "ffn_norm.weight", spec.n_embd);
    matrix(p + "ffn_gate.weight", spec.n_embd, ff, in_std);
    matrix(p + "ffn_up.weight", spec.n_embd, ff, in_std);
    matrix(p + "ffn_down.weight", ff, spec.n_embd, 1.0f / std::sqrt(float(ff)));
    norm(p + "post_ffw_norm.weight", spec.n_embd);
    norm(p + "layer_output_scale.weight", 1);
    if (n_pl > 0) {
      matrix(p + "inp_gate.weight", spec.n_embd, n_pl, in_std);
      matrix(p + "proj.weight", n_pl, spec.n_embd, 1.0f / std::sqrt(float(n_pl)));
      norm(p + "post_norm.weight", spec.n_embd);
    }
  }
  const int64_t q_width = int64_t(spec.n_head) * head_dim;
  const int64_t kv_width = int64_t(spec.n_head_kv) * head_dim;
  const float in_std = 1.0f / std::sqrt(float(spec.n_embd));
  auto f32 = [&](const std::string& name, std::vector<int64_t> ne,
                 std::function<void(std::vector<float>&)> fill) {
    plan.push_back({name, std::move(ne), GGML_TYPE_F32, std::move(fill)});
  };
  for (int l = 0; l < spec.n_layer && hybrid; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    norm(p + "attn_norm.weight", spec.n_embd);
    norm(p + "post_attention_norm.weight", spec.n_embd);
    if ((l + 1) % spec.full_attention_interval != 0) {
      // A gated delta net: Qwen3.5's initialisation ranges, so states decay at many speeds.
      matrix(p + "attn_qkv.weight", spec.n_embd, ssm.conv_dim(), in_std);
      matrix(p + "attn_gate.weight", spec.n_embd, ssm.value_dim(), in_std);
      f32(p + "ssm_conv1d.weight", {spec.ssm_conv_kernel, ssm.conv_dim()}, [=](std::vector<float>& d) {
        fill_uniform(d, name_seed(seed, p + "ssm_conv1d.weight"),
                     1.0f / std::sqrt(float(spec.ssm_conv_kernel)));
      });
      f32(p + "ssm_dt.bias", {ssm.v_heads}, [=](std::vector<float>& d) {
        SplitMix64 rng(name_seed(seed, p + "ssm_dt.bias"));
        for (float& x : d) x = -4.0f + 2.0f * rng.next_float();  // softplus: 0.02 .. 0.13
      });
      f32(p + "ssm_a", {ssm.v_heads}, [=](std::vector<float>& d) {
        SplitMix64 rng(name_seed(seed, p + "ssm_a"));
        for (float& x : d) x = -(1.0f + 15.0f * rng.next_float());  // -exp(A_log), A in 1 .. 16
      });
      matrix(p + "ssm_alpha.weight", spec.n_embd, ssm.v_heads, in_std);
      matrix(p + "ssm_beta.weight", spec.n_embd, ssm.v_heads, in_std);
      norm(p + "ssm_norm.weight", ssm.head_dim);
      matrix(p + "ssm_out.weight", ssm.value_dim(), spec.n_embd, 1.0f / std::sqrt(float(ssm.value_dim())));
    } else {
      // Gated attention: the q projection yields q and a gate per head.
      matrix(p + "attn_q.weight", spec.n_embd, 2 * q_width, in_std);
      matrix(p + "attn_k.weight", spec.n_embd, kv_width, in_std);
      matrix(p + "attn_v.weight", spec.n_embd, kv_width, in_std);
      norm(p + "attn_q_norm.weight", head_dim);
      norm(p + "attn_k_norm.weight", head_dim);
      matrix(p + "attn_output.weight", q_width, spec.n_embd, 1.0f / std::sqrt(float(q_width)));
    }
    matrix(p + "ffn_gate.weight", spec.n_embd, spec.n_ff, in_std);
    matrix(p + "ffn_up.weight", spec.n_embd, spec.n_ff, in_std);
    matrix(p + "ffn_down.weight", spec.n_ff, spec.n_embd, 1.0f / std::sqrt(float(spec.n_ff)));
  }
  for (int l = 0; l < spec.n_layer && !hybrid && !gemma4; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    norm(p + "attn_norm.weight", spec.n_embd);
    matrix(p + "attn_q.weight", spec.n_embd, q_width, 1.0f / std::sqrt(float(spec.n_embd)));
    matrix(p + "attn_k.weight", spec.n_embd, kv_width, 1.0f / std::sqrt(float(spec.n_embd)));
    matrix(p + "attn_v.weight", spec.n_embd, kv_width, 1.0f / std::sqrt(float(spec.n_embd)));
    if (spec.arch == "qwen2") {
      bias(p + "attn_q.bias", q_width);
      bias(p + "attn_k.bias", kv_width);
      bias(p + "attn_v.bias", kv_width);
    }
    if (spec.arch == "qwen3" || gemma3) {
      norm(p + "attn_q_norm.weight", head_dim);
      norm(p + "attn_k_norm.weight", head_dim);
    }
    matrix(p + "attn_output.weight", q_width, spec.n_embd, 1.0f / std::sqrt(float(q_width)));
    if (gemma3) norm(p + "post_attention_norm.weight", spec.n_embd);
    norm(p + "ffn_norm.weight", spec.n_embd);
    matrix(p + "ffn_gate.weight", spec.n_embd, spec.n_ff, 1.0f / std::sqrt(float(spec.n_embd)));
    matrix(p + "ffn_up.weight", spec.n_embd, spec.n_ff, 1.0f / std::sqrt(float(spec.n_embd)));
    matrix(p + "ffn_down.weight", spec.n_ff, spec.n_embd, 1.0f / std::sqrt(float(spec.n_ff)));
    if (gemma3) norm(p + "post_ffw_norm.weight", spec.n_embd);
  }

  // Tensor directory (shapes only; no data held in memory).
  ggml_init_params params{};
  params.mem_size = ggml_tensor_overhead() * (plan.size() + 1);
  params.no_alloc = true;
  ggml_context_ptr shapes(ggml_init(params));
  for (const TensorPlan& t : plan) {
    ggml_tensor* tensor = ggml_new_tensor(shapes.get(), t.type, int(t.ne.size()), t.ne.data());
    ggml_set_name(tensor, t.name.c_str());
    gguf_add_tensor(meta.get(), tensor);
  }

  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  if (!gguf_write_to_file(meta.get(), tmp.c_str(), /*only_meta=*/true)) {
    return errorf("io_error", "cannot write {}", tmp);
  }
  FILE* out = std::fopen(tmp.c_str(), "ab");
  if (!out) return errorf("io_error", "cannot append to {}", tmp);
  const size_t alignment = gguf_get_alignment(meta.get());
  std::vector<float> values;
  std::vector<uint8_t> bytes;
  bool ok = true;
  for (const TensorPlan& t : plan) {
    int64_t n_per_row = t.ne[0];
    int64_t n_rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) n_rows *= t.ne[d];
    values.assign(size_t(n_per_row * n_rows), 0.0f);
    t.fill(values);
    bytes.assign(ggml_row_size(t.type, n_per_row) * size_t(n_rows), 0);
    if (t.type == GGML_TYPE_F32) {
      std::memcpy(bytes.data(), values.data(), bytes.size());
    } else {
      ggml_quantize_chunk(t.type, values.data(), bytes.data(), 0, n_rows, n_per_row, nullptr);
    }
    const size_t padded = (bytes.size() + alignment - 1) / alignment * alignment;
    bytes.resize(padded, 0);
    ok = ok && std::fwrite(bytes.data(), 1, bytes.size(), out) == bytes.size();
  }
  ok = (std::fclose(out) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    return errorf("io_error", "cannot write tensor data to {}", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return errorf("io_error", "cannot rename {} to {}: {}", tmp, path, ec.message());
  }
  return {};
}

}  // namespace graft

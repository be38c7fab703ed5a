#include "adapters/targets.h"

#include <algorithm>

namespace graft {

namespace {

struct TargetNames {
  LoraTarget target;
  std::string_view gguf;
  std::string_view peft;
  std::string_view block;
  std::string_view short_name;
};

constexpr TargetNames kNames[] = {
    {LoraTarget::attn_q, "attn_q", "q_proj", "self_attn", "q"},
    {LoraTarget::attn_k, "attn_k", "k_proj", "self_attn", "k"},
    {LoraTarget::attn_v, "attn_v", "v_proj", "self_attn", "v"},
    {LoraTarget::attn_output, "attn_output", "o_proj", "self_attn", "o"},
    {LoraTarget::ffn_gate, "ffn_gate", "gate_proj", "mlp", "gate"},
    {LoraTarget::ffn_up, "ffn_up", "up_proj", "mlp", "up"},
    {LoraTarget::ffn_down, "ffn_down", "down_proj", "mlp", "down"},
    // qwen35's linear-attention (gated delta-net) layers, as Hugging Face's Qwen3.5 names them.
    {LoraTarget::attn_qkv, "attn_qkv", "in_proj_qkv", "linear_attn", "qkv"},
    {LoraTarget::attn_gate, "attn_gate", "in_proj_z", "linear_attn", "z"},
    {LoraTarget::ssm_alpha, "ssm_alpha", "in_proj_a", "linear_attn", "alpha"},
    {LoraTarget::ssm_beta, "ssm_beta", "in_proj_b", "linear_attn", "beta"},
    {LoraTarget::ssm_out, "ssm_out", "out_proj", "linear_attn", "out"},
    // gemma4's per-layer inputs, as Hugging Face's Gemma 4 (and Gemma 3n) names them.
    {LoraTarget::per_layer_gate, "inp_gate", "per_layer_input_gate", "", "pl_gate"},
    {LoraTarget::per_layer_proj, "proj", "per_layer_projection", "", "pl_proj"},
};

const TargetNames& names(LoraTarget target) {
  for (const auto& n : kNames) {
    if (n.target == target) return n;
  }
  return kNames[0];
}

}  // namespace

std::string_view gguf_target_name(LoraTarget target) {
  return names(target).gguf;
}
std::string_view peft_target_name(LoraTarget target) {
  return names(target).peft;
}
std::string_view peft_block_name(LoraTarget target) {
  return names(target).block;
}

std::string peft_module_path(LoraTarget target) {
  const TargetNames& n = names(target);
  return n.block.empty() ? std::string(n.peft) : std::string(n.block) + "." + std::string(n.peft);
}

std::optional<LoraTarget> target_from_gguf_name(std::string_view name) {
  for (const auto& n : kNames) {
    if (n.gguf == name) return n.target;
  }
  return std::nullopt;
}

std::optional<LoraTarget> target_from_peft_name(std::string_view name) {
  for (const auto& n : kNames) {
    if (n.peft == name) return n.target;
  }
  return std::nullopt;
}

std::optional<LoraTarget> parse_target(std::string_view name) {
  for (const auto& n : kNames) {
    if (n.gguf == name || n.peft == name || n.short_name == name) return n.target;
  }
  return std::nullopt;
}

Result<std::vector<LoraTarget>> parse_target_list(std::string_view text) {
  if (text == "all") return std::vector<LoraTarget>(kAllLoraTargets.begin(), kAllLoraTargets.end());
  if (text == "attn") {
    return std::vector<LoraTarget>{LoraTarget::attn_q,      LoraTarget::attn_k,   LoraTarget::attn_v,
                                   LoraTarget::attn_output, LoraTarget::attn_qkv, LoraTarget::attn_gate,
                                   LoraTarget::ssm_alpha,   LoraTarget::ssm_beta, LoraTarget::ssm_out};
  }
  if (text == "mlp")
    return std::vector<LoraTarget>{LoraTarget::ffn_gate, LoraTarget::ffn_up, LoraTarget::ffn_down};
  std::vector<LoraTarget> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view name = text.substr(start, comma - start);
    auto target = parse_target(name);
    if (!target) {
      return errorf(
          "invalid_argument",
          "unknown target '{}' (q, k, v, o, gate, up, down, qkv, z, alpha, beta, out, pl_gate, pl_proj, "
          "or all, attn, mlp)",
          name);
    }
    out.push_back(*target);
    start = comma + 1;
  }
  return out;
}

bool lora_architecture_supported(std::string_view arch) {
  return arch == "llama" || arch == "qwen2" || arch == "qwen3" || arch == "qwen35" || arch == "gemma3" ||
         arch == "gemma4" || arch == "minicpm";
}

std::string base_tensor_name(int layer, LoraTarget target) {
  return "blk." + std::to_string(layer) + "." + std::string(gguf_target_name(target)) + ".weight";
}

}  // namespace graft

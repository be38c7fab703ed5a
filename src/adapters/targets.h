// The projections a LoRA adapter may target, and their names in the two file
// formats: GGUF ("blk.N.attn_q.weight") and PEFT ("model.layers.N.self_attn.q_proj").
// The names are the same for every architecture graft supports (llama, qwen2,
// qwen3, qwen35); qwen35's linear-attention layers add five projections
// ("blk.N.attn_qkv.weight", "model.layers.N.linear_attn.in_proj_qkv", ...).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/lora.h"
#include "util/result.h"

namespace graft {

inline constexpr std::array<LoraTarget, 12> kAllLoraTargets = {
    LoraTarget::attn_q,    LoraTarget::attn_k,    LoraTarget::attn_v,   LoraTarget::attn_output,
    LoraTarget::ffn_gate,  LoraTarget::ffn_up,    LoraTarget::ffn_down, LoraTarget::attn_qkv,
    LoraTarget::attn_gate, LoraTarget::ssm_alpha, LoraTarget::ssm_beta, LoraTarget::ssm_out,
};

// "attn_q", ... as in GGUF tensor names.
std::string_view gguf_target_name(LoraTarget target);
// "q_proj", ... as in PEFT module names and target_modules.
std::string_view peft_target_name(LoraTarget target);
// "self_attn" or "mlp": the PEFT block the module sits in.
std::string_view peft_block_name(LoraTarget target);

std::optional<LoraTarget> target_from_gguf_name(std::string_view name);
std::optional<LoraTarget> target_from_peft_name(std::string_view name);
// Accepts either naming ("q_proj" or "attn_q") and the short forms q, k, v,
// o, gate, up, down.
std::optional<LoraTarget> parse_target(std::string_view name);

// "all", "attn" (attention and linear-attention projections), "mlp", or a
// comma-separated list of names parse_target knows.
Result<std::vector<LoraTarget>> parse_target_list(std::string_view text);

// Whether graft maps adapters onto this GGUF architecture.
bool lora_architecture_supported(std::string_view arch);

// The GGUF name of a target's base weight, "blk.<layer>.attn_q.weight".
std::string base_tensor_name(int layer, LoraTarget target);

}  // namespace graft

// The projections a LoRA adapter may target, and their names in the two file
// formats: GGUF ("blk.N.attn_q.weight") and PEFT ("model.layers.N.self_attn.q_proj").
// The names are the same for every architecture graft supports (llama, qwen2,
// qwen3, qwen35, gemma3, gemma4, minicpm); qwen35's linear-attention layers
// add five projections ("blk.N.attn_qkv.weight",
// "model.layers.N.linear_attn.in_proj_qkv", ...) and gemma4's per-layer
// inputs two, which sit on the decoder layer itself, in no block
// ("blk.N.inp_gate.weight", "model.layers.N.per_layer_input_gate").
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/lora.h"
#include "util/result.h"

namespace graft {

inline constexpr std::array<LoraTarget, 14> kAllLoraTargets = {
    LoraTarget::attn_q,         LoraTarget::attn_k,         LoraTarget::attn_v,   LoraTarget::attn_output,
    LoraTarget::ffn_gate,       LoraTarget::ffn_up,         LoraTarget::ffn_down, LoraTarget::attn_qkv,
    LoraTarget::attn_gate,      LoraTarget::ssm_alpha,      LoraTarget::ssm_beta, LoraTarget::ssm_out,
    LoraTarget::per_layer_gate, LoraTarget::per_layer_proj,
};
// "attn_q", ... as in GGUF tensor names.
std::string_view gguf_target_name(LoraTarget target);
// "q_proj", ... as in PEFT module names and target_modules.
std::string_view peft_target_name(LoraTarget target);
// "self_attn", "mlp" or "linear_attn": the PEFT block the module sits in
// ("" for gemma4's per-layer-input projections, which sit on the layer).
std::string_view peft_block_name(LoraTarget target);

// "self_attn.q_proj", ...: the module's path within a decoder layer (just
// "per_layer_input_gate" for a module on the layer itself).
std::string peft_module_path(LoraTarget target);

std::optional<LoraTarget> target_from_gguf_name(std::string_view name);
std::optional<LoraTarget> target_from_peft_name(std::string_view name);
// Accepts either naming ("q_proj" or "attn_q") and the short forms q, k, v,
// o, gate, up, down, qkv, z, alpha, beta, out, pl_gate, pl_proj.
std::optional<LoraTarget> parse_target(std::string_view name);

// "all", "attn" (attention and linear-attention projections), "mlp", or a
// comma-separated list of names parse_target knows. ("all" includes gemma4's
// per-layer-input projections, which are neither attention nor MLP.)
Result<std::vector<LoraTarget>> parse_target_list(std::string_view text);

// Whether graft maps adapters onto this GGUF architecture.
bool lora_architecture_supported(std::string_view arch);

// The GGUF name of a target's base weight, "blk.<layer>.attn_q.weight".
std::string base_tensor_name(int layer, LoraTarget target);

}  // namespace graft

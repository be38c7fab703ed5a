// PEFT LoRA adapters (the Hugging Face standard): a folder holding
// adapter_config.json and adapter_model.safetensors with tensors named
// "base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight".
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "adapters/base_model.h"
#include "adapters/lora_adapter.h"
#include "io/safetensors.h"

namespace graft {

inline constexpr const char* kPeftConfigFile = "adapter_config.json";
inline constexpr const char* kPeftWeightsFile = "adapter_model.safetensors";

// The adapter_config.json fields graft reads. Unsupported variants (DoRA,
// fan_in_fan_out, trained biases, alpha_pattern, non-LoRA types) are errors.
struct PeftConfig {
  int r = 0;
  float lora_alpha = 0.0f;
  bool use_rslora = false;
  std::vector<std::string> target_modules;  // a regex string becomes one entry
  std::vector<int> layers_to_transform;     // empty: every layer
  std::map<std::string, int> rank_pattern;  // module path -> its own rank
  std::string base_model_name_or_path;
};

Result<PeftConfig> parse_peft_config(const std::string& json, const std::string& where);
std::string peft_config_json(const PeftConfig& config);

// Whether a folder looks like a PEFT adapter (holds either of its two files).
bool is_peft_folder(const fs::path& dir);

// Reads the config and the safetensors header; no weights.
Result<AdapterDescription> describe_peft(const fs::path& dir);
// Reads the weights (in place, in their own dtypes), checking them against
// the header as describe_peft does.
Result<LoraAdapter> read_peft(const fs::path& dir);

struct PeftWriteOptions {
  std::string base_model_name_or_path;
  SafetensorsDtype dtype = SafetensorsDtype::f32;
};

// Writes adapter_model.safetensors, then adapter_config.json, each atomically,
// creating the folder if needed.
Status write_peft(const fs::path& dir, const LoraAdapter& adapter, const PeftWriteOptions& options = {});

// "base_model.model.model.layers.N.<block>.<module>.lora_<A|B>.weight"
std::string peft_tensor_name(int layer, LoraTarget target, bool lora_b);

// A tensor name of a decoder layer, as PEFT and mlx-lm write them: the layer
// N of its first "layers.N", and the dot-separated parts after it (block,
// module, side, ...). nullopt when the name has no "layers.N".
struct LayerTensorName {
  int layer = 0;
  std::vector<std::string> tail;
};
std::optional<LayerTensorName> split_layer_tensor_name(const std::string& name);

// A LoRA matrix's tensor as graft reads it: two dimensions, F32, F16 or BF16;
// else the error that names tensor `t` of `where`.
Status check_lora_matrix_tensor(const SafetensorsTensor& t, const std::string& where);

// The projection `module` of `block` names (as Hugging Face names them), or
// the error that says why tensor `name` of `where` names none.
Result<LoraTarget> projection_target(const std::string& block, const std::string& module,
                                     const std::string& name, const std::string& where);

// Qwen3.5's linear-attention layers with fewer key heads than value heads:
// Hugging Face orders the value heads grouped by key head (k0v0, k0v1, ...,
// k1v0, ...), GGUF files tile them (k0v0, k1v0, ..., k0v1, ...), as
// llama.cpp's converter reorders the base weights. PEFT adapters are in the
// first order, graft's engine and GGUF adapters in the second: this turns
// the value-head rows of lora_B (in_proj_qkv's v part, in_proj_z, in_proj_a,
// in_proj_b) and the value-head columns of out_proj's lora_A from one order
// into the other. Other adapters are left as they are.
enum class HeadOrder { peft_to_gguf, gguf_to_peft };
void reorder_value_heads(LoraAdapter& adapter, const BaseModel& base, HeadOrder direction);

}  // namespace graft

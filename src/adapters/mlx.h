// mlx-lm LoRA adapters (what `mlx_lm.lora` trains, and mlx-bun reads): a
// folder holding adapter_config.json and adapters.safetensors with tensors
// named "model.layers.N.self_attn.q_proj.lora_a". Against PEFT:
//   - lora_a is [n_in, rank] and lora_b [rank, n_out] (PEFT's transposed);
//   - the delta is scale * (x · lora_a) · lora_b: "scale" is the multiplier
//     itself (graft keeps it as alpha = scale * rank);
//   - adapter_config.json holds the training arguments, with the LoRA ones in
//     "lora_parameters" {"rank", "scale", "dropout", "keys"} and the number of
//     adapted (last) layers in "num_layers".
// The weights are in Hugging Face's layout, as PEFT's are.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "adapters/lora_adapter.h"
#include "io/safetensors.h"

namespace graft {

inline constexpr const char* kMlxConfigFile = "adapter_config.json";
inline constexpr const char* kMlxWeightsFile = "adapters.safetensors";

// The adapter_config.json fields graft reads. Errors name the field at fault
// ("lora_parameters.rank", …); DoRA and full fine-tunes are refused.
struct MlxConfig {
  int rank = 0;
  float scale = 0.0f;
  float dropout = 0.0f;                          // training only
  std::optional<std::vector<std::string>> keys;  // "self_attn.q_proj", …; nullopt: mlx-lm's defaults
  int num_layers = -1;                           // -1: every layer
  std::string model;                             // the base model it was trained on; may be empty
};

Result<MlxConfig> parse_mlx_config(const std::string& json, const std::string& where);
std::string mlx_config_json(const MlxConfig& config);

// Whether a folder holds an mlx-lm adapter: adapters.safetensors, or an
// adapter_config.json with "lora_parameters".
bool is_mlx_folder(const fs::path& dir);

// Reads the config and the safetensors header; no weights.
Result<AdapterDescription> describe_mlx(const fs::path& dir);
// Reads the weights, transposed into PEFT's orientation (in their own dtypes).
Result<LoraAdapter> read_mlx(const fs::path& dir);

// Writes an adapter as mlx-lm saves it (for tests and conversions): every
// pair must have the adapter's rank.
Status write_mlx(const fs::path& dir, const LoraAdapter& adapter,
                 SafetensorsDtype dtype = SafetensorsDtype::f32);

// "model.layers.N.<block>.<module>.lora_<a|b>"
std::string mlx_tensor_name(int layer, LoraTarget target, bool lora_b);

}  // namespace graft

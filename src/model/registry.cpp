#include "model/arch.h"

namespace graft {

namespace {

constexpr Architecture kArchitectures[] = {
    {"llama", GGML_ROPE_TYPE_NORMAL, /*qkv_bias=*/false, /*qk_norm=*/false, build_llama},
    {"qwen2", GGML_ROPE_TYPE_NEOX, /*qkv_bias=*/true, /*qk_norm=*/false, build_qwen},
    {"qwen3", GGML_ROPE_TYPE_NEOX, /*qkv_bias=*/false, /*qk_norm=*/true, build_qwen},
    {"qwen35", GGML_ROPE_TYPE_NEOX, /*qkv_bias=*/false, /*qk_norm=*/true, build_qwen35, read_qwen35_config,
     load_qwen35_layer},
    {"gemma3", GGML_ROPE_TYPE_NEOX, /*qkv_bias=*/false, /*qk_norm=*/true, build_gemma3, read_gemma3_config,
     load_gemma3_layer},
    {"gemma4", GGML_ROPE_TYPE_NEOX, /*qkv_bias=*/false, /*qk_norm=*/true, build_gemma4, read_gemma4_config,
     load_gemma4_layer, load_gemma4_weights},
    {"minicpm", GGML_ROPE_TYPE_NORMAL, /*qkv_bias=*/false, /*qk_norm=*/false, build_minicpm,
     read_minicpm_config, load_minicpm_layer},
};

}  // namespace

const Architecture* find_architecture(const std::string& name) {
  for (const Architecture& a : kArchitectures) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

std::string supported_architectures() {
  std::string names;
  for (const Architecture& a : kArchitectures) names += (names.empty() ? "" : ", ") + std::string(a.name);
  return names;
}

}  // namespace graft

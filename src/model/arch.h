// The architectures graft can run: one registry line each (registry.cpp),
// one file per family for the graph (llama.cpp, qwen.cpp, qwen35.cpp, gemma3.cpp, gemma4.cpp,
// minicpm.cpp).
#pragma once

#include <string>

#include <ggml.h>

#include "util/result.h"

namespace graft {

class Model;
class GgufFile;
class WeightsLoader;
struct GraphContext;
struct ModelConfig;
struct LayerWeights;
struct ModelWeights;

struct Architecture {
  const char* name;                                            // general.architecture
  int rope_mode;                                               // GGML_ROPE_TYPE_NORMAL or GGML_ROPE_TYPE_NEOX
  bool qkv_bias;                                               // q, k, v carry biases
  bool qk_norm;                                                // RMS norm on each q and k head
  ggml_tensor* (*build)(GraphContext& g, const Model& model);  // returns the logits
  // Optional, for families beyond the llama-shaped block (null: none).
  // Reads the family's own hyperparameters after the common ones.
  Status (*read_config)(const GgufFile& f, ModelConfig& c) = nullptr;
  // Loads one layer's weights instead of the llama-shaped block's.
  Status (*load_layer)(WeightsLoader& loader, const ModelConfig& c, int layer, LayerWeights& w) = nullptr;
  // Loads the family's own model-wide weights, after the layers'.
  Status (*load_weights)(WeightsLoader& loader, const ModelConfig& c, ModelWeights& w) = nullptr;
};

// The entry for `name`, or null.
const Architecture* find_architecture(const std::string& name);
// "llama, qwen2, qwen3": for error messages.
std::string supported_architectures();

// Graph builders, one per family file.
ggml_tensor* build_llama(GraphContext& g, const Model& model);
ggml_tensor* build_qwen(GraphContext& g, const Model& model);
ggml_tensor* build_qwen35(GraphContext& g, const Model& model);
Status read_qwen35_config(const GgufFile& f, ModelConfig& c);
Status load_qwen35_layer(WeightsLoader& loader, const ModelConfig& c, int layer, LayerWeights& w);
ggml_tensor* build_gemma3(GraphContext& g, const Model& model);
Status read_gemma3_config(const GgufFile& f, ModelConfig& c);
Status load_gemma3_layer(WeightsLoader& loader, const ModelConfig& c, int layer, LayerWeights& w);
ggml_tensor* build_gemma4(GraphContext& g, const Model& model);
Status read_gemma4_config(const GgufFile& f, ModelConfig& c);
Status load_gemma4_layer(WeightsLoader& loader, const ModelConfig& c, int layer, LayerWeights& w);
Status load_gemma4_weights(WeightsLoader& loader, const ModelConfig& c, ModelWeights& w);
ggml_tensor* build_minicpm(GraphContext& g, const Model& model);
Status read_minicpm_config(const GgufFile& f, ModelConfig& c);
Status load_minicpm_layer(WeightsLoader& loader, const ModelConfig& c, int layer, LayerWeights& w);

}  // namespace graft

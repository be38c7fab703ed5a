// The architectures graft can run: one registry line each (registry.cpp),
// one file per family for the graph (llama.cpp, qwen.cpp).
#pragma once

#include <string>

#include <ggml.h>

namespace graft {

class Model;
struct GraphContext;

struct Architecture {
  const char* name;                                            // general.architecture
  int rope_mode;                                               // GGML_ROPE_TYPE_NORMAL or GGML_ROPE_TYPE_NEOX
  bool qkv_bias;                                               // q, k, v carry biases
  bool qk_norm;                                                // RMS norm on each q and k head
  ggml_tensor* (*build)(GraphContext& g, const Model& model);  // returns the logits
};

// The entry for `name`, or null.
const Architecture* find_architecture(const std::string& name);
// "llama, qwen2, qwen3": for error messages.
std::string supported_architectures();

// Graph builders, one per family file.
ggml_tensor* build_llama(GraphContext& g, const Model& model);
ggml_tensor* build_qwen(GraphContext& g, const Model& model);

}  // namespace graft

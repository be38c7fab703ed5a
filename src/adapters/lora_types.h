// The engine's LoRA types (model/lora.h): what the adapters layer produces for
// Model::mount_lora. Until model/lora.h exists, the same declarations stand in
// here so the file formats and the store can be built and tested first.
#pragma once

#if __has_include("model/lora.h")
#include "model/lora.h"
#else
#include <vector>

namespace graft {

enum class LoraTarget { attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down };

struct LoraPair {
  int layer = 0;
  LoraTarget target = LoraTarget::attn_q;
  int rank = 0;
  std::vector<float> a;  // rank x n_in, row-major
  std::vector<float> b;  // n_out x rank, row-major
};

struct LoraWeights {
  std::vector<LoraPair> pairs;
  float scale = 1.0f;  // alpha / rank
};

}  // namespace graft
#endif

// A LoRA adapter as its files describe it (header only: formats, ranks,
// shapes) and as its weights read back (pairs at their own ranks), plus the
// step to what the engine mounts (model/lora.h's LoraWeights).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/lora.h"
#include "util/result.h"

namespace graft {

namespace fs = std::filesystem;

enum class AdapterFormat { peft, gguf, mlx };
std::string_view format_name(AdapterFormat format);  // "peft", "gguf" or "mlx"

// How a pair's delta is scaled: alpha / rank, or alpha / sqrt(rank) with
// rsLoRA; alpha 0 means a scale of 1 (the GGUF convention).
struct LoraScaling {
  float alpha = 0.0f;
  int rank = 0;  // the adapter's nominal rank (PEFT "r")
  bool rslora = false;

  float scale_for(int pair_rank) const;
  float scale() const { return scale_for(rank); }
};

// One adapted projection, as the file header states it.
struct LoraModule {
  int layer = 0;
  LoraTarget target = LoraTarget::attn_q;
  int rank = 0;
  int64_t n_in = 0;   // columns of the base weight (lora_a: rank x n_in)
  int64_t n_out = 0;  // rows of the base weight (lora_b: n_out x rank)
};

// What an adapter's files say about it, read without loading the weights.
struct AdapterDescription {
  AdapterFormat format = AdapterFormat::peft;
  fs::path weights_path;     // adapter_model.safetensors or the .gguf
  std::string architecture;  // GGUF general.architecture; empty for PEFT
  std::string base_model;    // PEFT base_model_name_or_path, mlx-lm "model"; may be empty
  LoraScaling scaling;
  std::vector<LoraModule> modules;  // sorted by layer, then target
  uint64_t size_bytes = 0;          // of the weight file

  std::vector<LoraTarget> targets() const;  // distinct, in LoraTarget order
  std::vector<int> layers() const;          // distinct, ascending
};

// An adapter's weights: as read from its file (each matrix in the file's
// type, over the file's mapping, which the matrices keep alive), or made in
// memory (floats).
struct LoraAdapter {
  LoraScaling scaling;
  std::vector<LoraPair> pairs;  // sorted by layer, then target
};

// Sorts modules and rejects empty adapters, duplicates and bad ranks.
Status finish_description(AdapterDescription& description, const std::string& where);

// The weights the engine mounts: scale = the nominal alpha / rank, and pairs
// whose rank differs (PEFT rank_pattern) get their own scale folded into b
// (which makes b floats).
LoraWeights to_mountable(LoraAdapter adapter);

// The modules of a LoraAdapter (n_in, n_out from the sizes of a and b).
std::vector<LoraModule> modules_of(const LoraAdapter& adapter);

}  // namespace graft

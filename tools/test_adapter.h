// The test-adapter maker: deterministic random LoRA adapters shaped for a
// given base model, to be written in PEFT and GGUF form (the same weights in
// both), so graft and llama.cpp can be compared on the very same adapter.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "adapters/base_model.h"
#include "adapters/lora_adapter.h"
#include "adapters/targets.h"

namespace graft {

struct TestAdapterSpec {
  std::string base_path;  // the base model's GGUF: architecture and shapes
  int rank = 8;
  float alpha = 16.0f;
  std::vector<LoraTarget> targets{kAllLoraTargets.begin(), kAllLoraTargets.end()};
  std::vector<int> layers;  // empty: every layer
  uint64_t seed = 1;
  // The RMS of the adapter's delta relative to the base projection's output,
  // for an input of unit RMS: 0.5 changes greedy text visibly.
  float strength = 0.5f;
};

// Same spec, same weights, on every machine. Errors name the bad field.
Result<LoraAdapter> make_test_adapter(const TestAdapterSpec& spec);
// The same, shaped for an already opened base (spec.base_path is not read).
Result<LoraAdapter> make_test_adapter(const TestAdapterSpec& spec, const BaseModel& base);

}  // namespace graft

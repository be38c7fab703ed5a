// The test-adapter maker: deterministic random LoRA adapters shaped for a
// given base model, to be written in PEFT and GGUF form (the same weights in
// both), so graft and llama.cpp can be compared on the very same adapter.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "adapters/base_model.h"
#include "adapters/lora_adapter.h"
#include "adapters/targets.h"

namespace graft {

struct TestAdapterSpec {
  std::string base_path;  // the base model's GGUF: architecture and shapes
  int rank = 8;
  float alpha = 16.0f;
  std::vector<LoraTarget> targets;  // empty: every projection the base model has
  std::vector<int> layers;          // empty: every layer
  uint64_t seed = 1;
  // The RMS of the adapter's delta relative to the base projection's output,
  // for an input of unit RMS: 0.5 changes greedy text visibly.
  float strength = 0.5f;
};

// A target list as parse_target_list reads it; the groups (all, attn, mlp)
// keep only the projections the base model has.
Result<std::vector<LoraTarget>> test_adapter_targets(std::string_view text, const BaseModel& base);

// Same spec, same weights, on every machine. A target is made in each chosen
// layer that has it; one no chosen layer has is an error. Errors name the bad
// field.
Result<LoraAdapter> make_test_adapter(const TestAdapterSpec& spec);
// The same, shaped for an already opened base (spec.base_path is not read).
Result<LoraAdapter> make_test_adapter(const TestAdapterSpec& spec, const BaseModel& base);

}  // namespace graft

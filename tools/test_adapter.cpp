#include "tools/test_adapter.h"

#include <algorithm>
#include <cmath>

#include "adapters/base_model.h"
#include "tools/random.h"

namespace graft {

namespace {

uint64_t tensor_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull ^ (seed * 0x9E3779B97F4A7C15ull);
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return SplitMix64(h).next();
}

std::vector<float> uniform(size_t n, uint64_t seed, float stddev) {
  SplitMix64 rng(seed);
  const float half_width = stddev * std::sqrt(3.0f);
  std::vector<float> out(n);
  for (float& x : out) x = (rng.next_float() * 2.0f - 1.0f) * half_width;
  return out;
}

}  // namespace

Result<std::vector<LoraTarget>> test_adapter_targets(std::string_view text, const BaseModel& base) {
  GRAFT_TRY(std::vector<LoraTarget> targets, parse_target_list(text));
  if (text != "all" && text != "attn" && text != "mlp") return targets;
  std::erase_if(targets, [&](LoraTarget target) {
    for (const auto& [key, shape] : base.shapes) {
      if (key.second == target) return false;
    }
    return true;
  });
  return targets;
}

Result<LoraAdapter> make_test_adapter(const TestAdapterSpec& spec) {
  GRAFT_TRY(BaseModel base, BaseModel::open(spec.base_path));
  return make_test_adapter(spec, base);
}

Result<LoraAdapter> make_test_adapter(const TestAdapterSpec& spec, const BaseModel& base) {
  if (spec.rank <= 0) return errorf("invalid_argument", "rank must be positive, got {}", spec.rank);
  if (!std::isfinite(spec.alpha) || spec.alpha <= 0.0f) {
    return errorf("invalid_argument", "alpha must be a positive number, got {}", spec.alpha);
  }

  if (!lora_architecture_supported(base.architecture)) {
    return errorf("invalid_argument", "graft does not make adapters for '{}' models", base.architecture);
  }
  std::vector<int> layers = spec.layers;
  if (layers.empty()) {
    for (int l = 0; l < base.n_layer; ++l) layers.push_back(l);
  }
  LoraAdapter adapter;
  adapter.scaling = {spec.alpha, spec.rank, false};
  const float scale = adapter.scaling.scale();
  for (int layer : layers) {
    if (layer < 0 || layer >= base.n_layer) {
      return errorf("invalid_argument", "layer {} does not exist (the base model has {})", layer,
                    base.n_layer);
    }
  }
  // A target some layers lack (qwen35's layers have either attention or
  // linear-attention projections) is made where it exists; one no chosen
  // layer has is an error.
  std::vector<LoraTarget> targets = spec.targets;
  if (targets.empty()) {
    for (const auto& [key, shape] : base.shapes) {
      if (std::find(targets.begin(), targets.end(), key.second) == targets.end())
        targets.push_back(key.second);
    }
  }
  for (LoraTarget target : targets) {
    const bool somewhere = std::any_of(layers.begin(), layers.end(), [&](int layer) {
      return base.shapes.count({layer, target}) > 0;
    });
    if (!somewhere) {
      return errorf("invalid_argument", "the base model has no {}", base_tensor_name(layers.front(), target));
    }
  }
  for (int layer : layers) {
    for (LoraTarget target : kAllLoraTargets) {
      if (std::find(targets.begin(), targets.end(), target) == targets.end()) continue;
      auto shape = base.shapes.find({layer, target});
      if (shape == base.shapes.end()) continue;
      const auto [n_in, n_out] = shape->second;
      const std::string name = base_tensor_name(layer, target);
      LoraPair pair;
      pair.layer = layer;
      pair.target = target;
      pair.rank = spec.rank;
      pair.a = LoraMatrix::of_floats(uniform(
          size_t(spec.rank * n_in), tensor_seed(spec.seed, name + ".lora_a"), 1.0f / std::sqrt(float(n_in))));
      pair.b =
          LoraMatrix::of_floats(uniform(size_t(n_out * spec.rank), tensor_seed(spec.seed, name + ".lora_b"),
                                        spec.strength / (std::sqrt(float(spec.rank)) * scale)));
      adapter.pairs.push_back(std::move(pair));
    }
  }
  return adapter;
}

}  // namespace graft

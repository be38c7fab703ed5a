#include "adapters/lora_adapter.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "adapters/targets.h"

namespace graft {

std::string_view format_name(AdapterFormat format) {
  switch (format) {
    case AdapterFormat::peft:
      return "peft";
    case AdapterFormat::gguf:
      return "gguf";
    case AdapterFormat::mlx:
      return "mlx";
  }
  return "unknown";
}

float LoraScaling::scale_for(int pair_rank) const {
  if (alpha == 0.0f || pair_rank <= 0) return 1.0f;
  return rslora ? alpha / std::sqrt(float(pair_rank)) : alpha / float(pair_rank);
}

std::vector<LoraTarget> AdapterDescription::targets() const {
  std::set<LoraTarget> seen;
  for (const auto& m : modules) seen.insert(m.target);
  return {seen.begin(), seen.end()};
}

std::vector<int> AdapterDescription::layers() const {
  std::set<int> seen;
  for (const auto& m : modules) seen.insert(m.layer);
  return {seen.begin(), seen.end()};
}

Status finish_description(AdapterDescription& d, const std::string& where) {
  if (d.modules.empty()) return errorf("invalid_adapter", "{}: the adapter holds no LoRA weights", where);
  std::sort(d.modules.begin(), d.modules.end(), [](const LoraModule& a, const LoraModule& b) {
    return a.layer != b.layer ? a.layer < b.layer : a.target < b.target;
  });
  for (size_t i = 0; i < d.modules.size(); ++i) {
    const LoraModule& m = d.modules[i];
    if (i > 0 && m.layer == d.modules[i - 1].layer && m.target == d.modules[i - 1].target) {
      return errorf("invalid_adapter", "{}: layer {} {} appears twice", where, m.layer,
                    gguf_target_name(m.target));
    }
    if (m.rank <= 0 || m.n_in <= 0 || m.n_out <= 0) {
      return errorf("invalid_adapter", "{}: layer {} {} has an empty shape", where, m.layer,
                    gguf_target_name(m.target));
    }
  }
  if (d.scaling.rank <= 0) {
    // No nominal rank in the file (GGUF): the most common pair rank, the larger on a tie.
    std::map<int, int> count;
    for (const auto& m : d.modules) ++count[m.rank];
    int best = 0;
    for (const auto& [rank, n] : count) {
      if (best == 0 || n >= count[best]) best = rank;
    }
    d.scaling.rank = best;
  }
  return {};
}

LoraWeights to_mountable(LoraAdapter adapter) {
  LoraWeights weights;
  weights.scale = adapter.scaling.scale();
  for (LoraPair& pair : adapter.pairs) {
    const float own = adapter.scaling.scale_for(pair.rank);
    if (pair.rank != adapter.scaling.rank && own != weights.scale && weights.scale != 0.0f) {
      const float fold = own / weights.scale;
      std::vector<float> b = pair.b.floats();
      for (float& x : b) x *= fold;
      pair.b = LoraMatrix::of_floats(std::move(b));
    }
  }
  weights.pairs = std::move(adapter.pairs);
  return weights;
}

std::vector<LoraModule> modules_of(const LoraAdapter& adapter) {
  std::vector<LoraModule> out;
  for (const auto& p : adapter.pairs) {
    const int64_t rank = std::max(p.rank, 1);
    out.push_back({p.layer, p.target, p.rank, p.a.n / rank, p.b.n / rank});
  }
  return out;
}

}  // namespace graft

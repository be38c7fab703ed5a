#include "server/sampling_defaults.h"

#include <cmath>

#include "util/log.h"

namespace graft::server {

namespace {

// One sampling field: its request name, the GGUF key that recommends it ("":
// none), its range (the one requests are held to), and where it lives.
struct Field {
  const char* name;
  const char* gguf_key;
  double min, max;
  float SamplingOptions::*real = nullptr;
  int SamplingOptions::*integer = nullptr;
};

const Field kFields[] = {
    {"temperature", "general.sampling.temp", 0, 2, &SamplingOptions::temperature},
    {"top_k", "general.sampling.top_k", -1, 1 << 20, nullptr, &SamplingOptions::top_k},
    {"top_p", "general.sampling.top_p", 0, 1, &SamplingOptions::top_p},
    {"min_p", "general.sampling.min_p", 0, 1, &SamplingOptions::min_p},
    {"typical_p", "", 0, 1, &SamplingOptions::typical_p},
    {"xtc_probability", "general.sampling.xtc_probability", 0, 1, &SamplingOptions::xtc_probability},
    {"xtc_threshold", "general.sampling.xtc_threshold", 0, 1, &SamplingOptions::xtc_threshold},
    {"repeat_penalty", "general.sampling.penalty_repeat", 0.01, 10, &SamplingOptions::repetition_penalty},
    {"repeat_last_n", "general.sampling.penalty_last_n", -1, 1 << 20, nullptr,
     &SamplingOptions::penalty_last_n},
    {"presence_penalty", "", -2, 2, &SamplingOptions::presence_penalty},
    {"frequency_penalty", "", -2, 2, &SamplingOptions::frequency_penalty},
};

bool in_range(const Field& f, double v) {
  return std::isfinite(v) && v >= f.min && v <= f.max && (!f.integer || v == std::floor(v));
}

void set(const Field& f, SamplingOptions& options, double v) {
  if (f.real) options.*f.real = static_cast<float>(v);
  if (f.integer) options.*f.integer = static_cast<int>(v);
}

}  // namespace

nlohmann::json SamplingDefaults::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (const Field& f : kFields) {
    if (f.real) out[f.name] = options.*f.real;
    if (f.integer) out[f.name] = options.*f.integer;
  }
  out["source"] = source;
  return out;
}

void apply_model_sampling(const GgufFile& gguf, SamplingDefaults& defaults) {
  for (const Field& f : kFields) {
    if (!*f.gguf_key || !gguf.has(f.gguf_key)) continue;
    auto value = gguf.get_float(f.gguf_key);
    if (!value) {
      GRAFT_LOG_WARN("ignoring the model's recommended {}: {}", f.name, value.error().message);
      continue;
    }
    if (!in_range(f, *value)) {
      GRAFT_LOG_WARN("ignoring the model's recommended {} = {} ({}): it must be {} in {} .. {}", f.name,
                     *value, f.gguf_key, f.integer ? "an integer" : "a number", f.min, f.max);
      continue;
    }
    set(f, defaults.options, *value);
    defaults.source[f.name] = "model";
  }
  if (auto mirostat = gguf.find_int("general.sampling.mirostat"); mirostat && *mirostat != 0) {
    GRAFT_LOG_WARN("the model recommends mirostat sampling, which graft does not implement");
  }
  if (gguf.has("general.sampling.sequence")) {
    GRAFT_LOG_WARN("the model recommends a sampler order (general.sampling.sequence); graft applies its own");
  }
}

Status apply_sampling_flags(const std::map<std::string, double>& flags, SamplingDefaults& defaults) {
  for (const auto& [name, value] : flags) {
    const Field* field = nullptr;
    for (const Field& f : kFields) {
      if (name == f.name) field = &f;
    }
    if (!field) return errorf("invalid_argument", "no sampling option '{}'", name);
    if (!in_range(*field, value)) {
      return errorf("invalid_argument", "the default {} must be {} in {} .. {} (got {})", name,
                    field->integer ? "an integer" : "a number", field->min, field->max, value);
    }
    set(*field, defaults.options, value);
    defaults.source[name] = "flag";
  }
  return {};
}

}  // namespace graft::server

// The sampling a request gets for the fields it leaves out: graft's own
// defaults (engine/request.h), replaced by the model's recommendations (the
// GGUF's general.sampling.* keys, as llama.cpp reads them), replaced in turn
// by `graft serve` flags (--temp, --top-k, ...).
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "io/gguf_file.h"
#include "util/result.h"

namespace graft::server {

struct SamplingDefaults {
  SamplingOptions options;
  // Request field name (temperature, top_k, ...) → "model" or "flag", for
  // the fields that are not graft's own default.
  std::map<std::string, std::string> source;

  // {"temperature": 0.6, ..., "source": {"temperature": "model"}} for /v1/models.
  nlohmann::json to_json() const;
};

// Applies the model's general.sampling.* keys. A value out of range or of
// the wrong type is skipped with a warning naming the key; so is a
// recommendation graft cannot follow (mirostat, a custom sampler order).
void apply_model_sampling(const GgufFile& gguf, SamplingDefaults& defaults);

// Applies `graft serve` flags, keyed by request field name ("temperature",
// "top_k", ...). Errors name the field and its range.
Status apply_sampling_flags(const std::map<std::string, double>& flags, SamplingDefaults& defaults);

}  // namespace graft::server

// graft_adapter.json: what graft records about an adapter beside its weights
// (id, base model repo id and fingerprint, rank, alpha/scale, targets,
// layers, creation time, and optional task/dataset/notes). Fields graft does
// not know are kept when the file is rewritten.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "adapters/base_model.h"
#include "adapters/lora_adapter.h"

namespace graft {

inline constexpr const char* kAdapterMetadataFile = "graft_adapter.json";

struct AdapterMetadata {
  std::string id;
  std::string base_repo;
  std::string base_fingerprint;  // "sha256:<hex>" (model_fingerprint)
  std::string base_architecture;
  int rank = 0;
  float alpha = 0.0f;
  float scale = 0.0f;
  std::vector<std::string> target_modules;  // PEFT names: "q_proj", ...
  std::vector<int> layers;
  std::string created;  // ISO 8601, UTC
  std::string task;     // optional fields: "" when absent
  std::string dataset;
  std::string notes;
  nlohmann::json extra = nlohmann::json::object();  // unknown fields, kept
};

Result<AdapterMetadata> parse_adapter_metadata(const std::string& json, const std::string& where);
std::string adapter_metadata_json(const AdapterMetadata& metadata);

// nullopt when the file does not exist; an error when it cannot be read or parsed.
Result<std::optional<AdapterMetadata>> read_adapter_metadata(const fs::path& file);
// Atomic (temporary file, then rename).
Status write_adapter_metadata(const fs::path& file, const AdapterMetadata& metadata);

// Metadata for an adapter made for (or checked against) `base`, created now.
AdapterMetadata describe_for_base(const std::string& id, const AdapterDescription& adapter,
                                  const BaseModel& base);

// "2025-01-31T12:34:56Z"
std::string utc_now_iso8601();

}  // namespace graft

// What `graft pi install` writes for the Pi coding agent: graft's provider in
// Pi's models.json, and graft's Pi extension (integrations/pi/graft-adapter.ts,
// built into the binary).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "util/files.h"

namespace graft {
// The extension's source, as it was in the tree graft was built from.
std::string_view pi_extension_source();
}  // namespace graft

namespace graft::cli {

inline constexpr const char* kPiProvider = "graft";
inline constexpr const char* kPiExtensionFile = "graft-adapter.ts";

// Pi's folder: $PI_CODING_AGENT_DIR, else ~/.pi/agent.
fs::path pi_agent_dir();

struct PiModel {
  std::string base_url;  // graft's OpenAI API: "http://127.0.0.1:8080/v1"
  std::string id;        // the served model's id
  int context_window = 0;
  int max_tokens = 0;
};

// Pi's models.json (`existing`: its text, "" when there is none) with graft's
// provider written: baseUrl, api, apiKey (the name of the GRAFT_API_KEY
// variable, which Pi reads), the compat flags graft needs, and the one model.
// Fields the user added to graft's provider and every other provider stay as
// they were. Errors ("invalid_value") when `existing` is not a models.json.
Result<nlohmann::ordered_json> merge_pi_models(const std::string& existing, const PiModel& model);

}  // namespace graft::cli

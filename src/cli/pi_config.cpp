#include "cli/pi_config.h"

#include <cstdlib>

namespace graft::cli {

using ojson = nlohmann::ordered_json;

fs::path pi_agent_dir() {
  if (const char* dir = std::getenv("PI_CODING_AGENT_DIR"); dir && *dir) return dir;
  const char* home = std::getenv("HOME");
  return fs::path(home && *home ? home : ".") / ".pi" / "agent";
}

Result<ojson> merge_pi_models(const std::string& existing, const PiModel& model) {
  ojson config = ojson::object();
  if (!existing.empty()) {
    config = ojson::parse(existing, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      return make_error("invalid_value", "it is not a JSON object; fix or remove it, then run this again");
    }
  }
  if (!config.contains("providers")) config["providers"] = ojson::object();
  ojson& providers = config["providers"];
  if (!providers.is_object()) return make_error("invalid_value", "its 'providers' is not an object");
  ojson& graft = providers[kPiProvider];
  if (!graft.is_object()) graft = ojson::object();
  graft["baseUrl"] = model.base_url;
  graft["api"] = "openai-completions";
  // The name of a variable: Pi sends its value when it is set, else the name itself,
  // which a server without --api-key ignores.
  graft["apiKey"] = "GRAFT_API_KEY";
  // graft refuses what it does not do (reasoning_effort, strict tool schemas) rather
  // than ignore it, and stores no completions; the system prompt goes as "system".
  graft["compat"] = ojson{{"supportsStore", false},
                          {"supportsDeveloperRole", false},
                          {"supportsReasoningEffort", false},
                          {"supportsStrictMode", false}};
  graft["models"] =
      ojson::array({ojson{{"id", model.id},
                          {"name", model.id + " (graft)"},
                          {"input", ojson::array({"text"})},
                          {"contextWindow", model.context_window},
                          {"maxTokens", model.max_tokens},
                          {"cost", {{"input", 0}, {"output", 0}, {"cacheRead", 0}, {"cacheWrite", 0}}}}});
  return config;
}

}  // namespace graft::cli

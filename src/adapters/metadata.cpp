#include "adapters/metadata.h"

#include <ctime>

#include "adapters/targets.h"
#include "util/files.h"

namespace graft {

namespace {

using json = nlohmann::json;

const char* const kKnownFields[] = {"id",     "base",    "rank", "alpha",   "scale", "target_modules",
                                    "layers", "created", "task", "dataset", "notes"};

bool is_known(const std::string& key) {
  for (const char* k : kKnownFields) {
    if (key == k) return true;
  }
  return false;
}

}  // namespace

Result<AdapterMetadata> parse_adapter_metadata(const std::string& text, const std::string& where) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return errorf("invalid_adapter", "{}: not a JSON object", where);
  auto bad = [&](const char* field, const char* want) {
    return errorf("invalid_adapter", "{}: '{}' must be {}", where, field, want);
  };
  AdapterMetadata m;
  auto get_string = [&](const json& obj, const char* field, std::string& out, bool required) -> Status {
    auto it = obj.find(field);
    if (it == obj.end() || it->is_null()) {
      if (required) return bad(field, "a string");
      return {};
    }
    if (!it->is_string()) return bad(field, "a string");
    out = it->get<std::string>();
    return {};
  };
  GRAFT_TRY_STATUS(get_string(j, "id", m.id, true));
  auto base = j.find("base");
  if (base == j.end() || !base->is_object())
    return bad("base", "an object with the base model's fingerprint");
  GRAFT_TRY_STATUS(get_string(*base, "fingerprint", m.base_fingerprint, true));
  GRAFT_TRY_STATUS(get_string(*base, "repo", m.base_repo, false));
  GRAFT_TRY_STATUS(get_string(*base, "architecture", m.base_architecture, false));
  if (j.contains("rank")) {
    if (!j["rank"].is_number_integer()) return bad("rank", "an integer");
    m.rank = j["rank"].get<int>();
  }
  if (j.contains("alpha")) {
    if (!j["alpha"].is_number()) return bad("alpha", "a number");
    m.alpha = j["alpha"].get<float>();
  }
  if (j.contains("scale")) {
    if (!j["scale"].is_number()) return bad("scale", "a number");
    m.scale = j["scale"].get<float>();
  }
  if (j.contains("target_modules")) {
    if (!j["target_modules"].is_array()) return bad("target_modules", "an array of strings");
    for (const auto& t : j["target_modules"]) {
      if (!t.is_string()) return bad("target_modules", "an array of strings");
      m.target_modules.push_back(t.get<std::string>());
    }
  }
  if (j.contains("layers")) {
    if (!j["layers"].is_array()) return bad("layers", "an array of integers");
    for (const auto& l : j["layers"]) {
      if (!l.is_number_integer()) return bad("layers", "an array of integers");
      m.layers.push_back(l.get<int>());
    }
  }
  GRAFT_TRY_STATUS(get_string(j, "created", m.created, false));
  GRAFT_TRY_STATUS(get_string(j, "task", m.task, false));
  GRAFT_TRY_STATUS(get_string(j, "dataset", m.dataset, false));
  GRAFT_TRY_STATUS(get_string(j, "notes", m.notes, false));
  for (const auto& [key, value] : j.items()) {
    if (!is_known(key)) m.extra[key] = value;
  }
  return m;
}

std::string adapter_metadata_json(const AdapterMetadata& m) {
  json base = {{"repo", m.base_repo}, {"fingerprint", m.base_fingerprint}};
  if (!m.base_architecture.empty()) base["architecture"] = m.base_architecture;
  nlohmann::ordered_json j = {
      {"id", m.id},         {"base", base},         {"rank", m.rank},
      {"alpha", m.alpha},   {"scale", m.scale},     {"target_modules", m.target_modules},
      {"layers", m.layers}, {"created", m.created},
  };
  if (!m.task.empty()) j["task"] = m.task;
  if (!m.dataset.empty()) j["dataset"] = m.dataset;
  if (!m.notes.empty()) j["notes"] = m.notes;
  for (const auto& [key, value] : m.extra.items()) j[key] = value;
  return j.dump(2) + "\n";
}

Result<std::optional<AdapterMetadata>> read_adapter_metadata(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return std::optional<AdapterMetadata>();
  GRAFT_TRY(std::string text, read_file(file));
  GRAFT_TRY(AdapterMetadata m, parse_adapter_metadata(text, file.string()));
  return std::optional<AdapterMetadata>(std::move(m));
}

Status write_adapter_metadata(const fs::path& file, const AdapterMetadata& metadata) {
  return write_file_atomic(file, adapter_metadata_json(metadata));
}

AdapterMetadata describe_for_base(const std::string& id, const AdapterDescription& adapter,
                                  const BaseModel& base) {
  AdapterMetadata m;
  m.id = id;
  m.base_repo = base.repo.empty() ? base.name : base.repo;
  m.base_fingerprint = base.fingerprint;
  m.base_architecture = base.architecture;
  m.rank = adapter.scaling.rank;
  m.alpha = adapter.scaling.alpha;
  m.scale = adapter.scaling.scale();
  for (LoraTarget t : adapter.targets()) m.target_modules.emplace_back(peft_target_name(t));
  m.layers = adapter.layers();
  m.created = utc_now_iso8601();
  return m;
}

std::string utc_now_iso8601() {
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

}  // namespace graft

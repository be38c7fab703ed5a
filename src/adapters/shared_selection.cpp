#include "adapters/shared_selection.h"

#include <ctime>

#include <nlohmann/json.hpp>

namespace graft {

namespace {

using json = nlohmann::json;

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace

fs::path shared_selection_path() {
  return data_dir() / "selection.json";
}

Result<std::optional<SharedSelection>> read_shared_selection(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::optional<SharedSelection>{};
  GRAFT_TRY(std::string text, read_file(path));
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](std::string_view what) {
    return errorf("invalid_value", "{}: {} (write it again with: graft adapters use ID|SPEC|none)",
                  path.string(), what);
  };
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  const auto adapter = j.find("adapter");
  if (adapter == j.end() || !adapter->is_string()) return bad("'adapter' must be a string");
  auto selection = parse_adapter_spec(adapter->get<std::string>());
  if (!selection) return bad(selection.error().message);
  SharedSelection out{std::move(selection).value(), ""};
  if (const auto updated = j.find("updated"); updated != j.end() && updated->is_string()) {
    out.updated = updated->get<std::string>();
  }
  return std::optional<SharedSelection>{std::move(out)};
}

Result<SharedSelection> write_shared_selection(const fs::path& path, const AdapterSelection& selection) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return errorf("io_error", "cannot create {}: {}", path.parent_path().string(), ec.message());
  SharedSelection out{selection, utc_now()};
  const json j = {{"adapter", selection.to_string()}, {"updated", out.updated}};
  GRAFT_TRY_STATUS(write_file_atomic(path, j.dump(2) + "\n"));
  return out;
}

Status clear_shared_selection(const fs::path& path) {
  std::error_code ec;
  fs::remove(path, ec);
  if (ec) return errorf("io_error", "cannot remove {}: {}", path.string(), ec.message());
  return {};
}

Status check_selectable(const AdapterSelection& selection, const AdapterStore& store, const BaseModel* base,
                        const std::function<bool(std::string_view id)>& is_loaded) {
  for (const AdapterChoice& c : selection.stack) {
    if (is_loaded && is_loaded(c.id)) continue;
    auto found = store.find(c.id);
    if (!found) {
      if (found.error().code != "not_found") return found.error();
      return errorf("not_found", "unknown adapter '{}': it is neither loaded nor in the adapter store", c.id);
    }
    if (!found->readable()) {
      return errorf("invalid_adapter", "adapter '{}' cannot be read: {}", c.id, found->problem);
    }
    if (base) {
      const Compatibility compat = check_compatibility(*found, *base);
      if (!compat.compatible) {
        return errorf("incompatible_adapter", "adapter '{}' does not fit the served model: {}", c.id,
                      compat.reason);
      }
    }
  }
  return {};
}

}  // namespace graft

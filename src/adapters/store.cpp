#include "adapters/store.h"

#include <algorithm>
#include <set>

#include "adapters/gguf_lora.h"
#include "adapters/mlx.h"
#include "adapters/peft.h"
#include "io/gguf_file.h"
#include "io/hf_cache.h"
#include "util/files.h"
#include "util/log.h"

namespace graft {

namespace {

bool has_extension(const fs::path& path, std::string_view ext) {
  return path.extension() == ext;
}

bool is_hidden(const fs::path& path) {
  const std::string name = path.filename().string();
  return name.empty() || name[0] == '.';
}

std::vector<fs::path> sorted_entries(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) out.push_back(it->path());
  std::sort(out.begin(), out.end());
  return out;
}

void read_metadata_into(AvailableAdapter& adapter) {
  auto metadata = read_adapter_metadata(adapter.metadata_path);
  if (!metadata) {
    adapter.problem = metadata.error().message;
  } else {
    adapter.metadata = std::move(metadata).value();
  }
}

void describe_into(AvailableAdapter& adapter, Result<AdapterDescription> description) {
  if (!description) {
    adapter.problem = description.error().message;
  } else {
    adapter.description = std::move(description).value();
  }
}

// An adapter folder: PEFT files, else exactly one GGUF adapter.
Result<AvailableAdapter> inspect_folder(const fs::path& dir) {
  AvailableAdapter adapter;
  adapter.id = dir.filename().string();
  adapter.path = dir;
  adapter.metadata_path = dir / kAdapterMetadataFile;
  std::error_code ec;
  const bool has_metadata = fs::exists(adapter.metadata_path, ec);
  if (is_mlx_folder(dir)) {
    describe_into(adapter, describe_mlx(dir));
  } else if (is_peft_folder(dir)) {
    describe_into(adapter, describe_peft(dir));
  } else {
    std::vector<fs::path> ggufs;
    for (const fs::path& entry : sorted_entries(dir)) {
      if (has_extension(entry, ".gguf") && !is_hidden(entry)) ggufs.push_back(entry);
    }
    if (ggufs.empty()) {
      if (!has_metadata)
        return errorf("not_found", "{}: no adapter files (PEFT, mlx-lm or GGUF LoRA) found", dir.string());
      adapter.problem =
          dir.string() + ": graft_adapter.json is there but no adapter weights (PEFT, mlx-lm or GGUF LoRA)";
    } else if (ggufs.size() > 1) {
      adapter.problem =
          fmt::format("{}: holds {} GGUF files; keep one adapter per folder", dir.string(), ggufs.size());
    } else {
      describe_into(adapter, describe_gguf_lora(ggufs[0]));
    }
  }
  const std::string problem = adapter.problem;
  read_metadata_into(adapter);
  if (!problem.empty()) adapter.problem = problem;  // the weights' problem comes first
  return adapter;
}

Result<AvailableAdapter> inspect_gguf_file(const fs::path& file) {
  AvailableAdapter adapter;
  adapter.id = file.stem().string();
  adapter.path = file;
  adapter.metadata_path = file.parent_path() / (adapter.id + "." + kAdapterMetadataFile);
  describe_into(adapter, describe_gguf_lora(file));
  const std::string problem = adapter.problem;
  read_metadata_into(adapter);
  if (!problem.empty()) adapter.problem = problem;
  return adapter;
}

// A cached repo's snapshot that is an adapter (PEFT files, or one GGUF
// LoRA), inspected, with the repo's id as its own.
std::optional<AvailableAdapter> hub_adapter(const hf::Snapshot& s) {
  if (!is_peft_folder(s.dir) && !is_mlx_folder(s.dir)) {
    int loras = 0;
    for (const std::string& f : s.files) {
      if (fs::path(f).extension() != ".gguf") continue;
      auto file = GgufFile::open((s.dir / f).string());
      if (!file || file->find_string("general.type").value_or("") != "adapter") return std::nullopt;
      ++loras;
    }
    if (loras != 1) return std::nullopt;
  }
  auto adapter = inspect_folder(s.dir);
  if (!adapter) return std::nullopt;
  adapter->id = s.repo.org.empty() ? s.repo.name : s.repo.org + "--" + s.repo.name;
  return std::move(adapter).value();
}

}  // namespace

Status validate_adapter_id(std::string_view id) {
  auto ok_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  };
  const bool valid = !id.empty() && id.size() <= 128 && std::all_of(id.begin(), id.end(), ok_char) &&
                     id[0] != '.' && id[0] != '-' && id[0] != '_' && id.find("..") == std::string_view::npos;
  if (!valid) {
    return errorf(
        "invalid_argument",
        "invalid adapter id '{}': use 1-128 letters, digits, '.', '_' or '-', starting with a letter or "
        "digit",
        id);
  }
  return {};
}

Result<AvailableAdapter> inspect_adapter(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return inspect_folder(path);
  if (fs::is_regular_file(path, ec)) {
    if (!has_extension(path, ".gguf")) {
      return errorf("invalid_adapter",
                    "{}: an adapter is a folder (PEFT, mlx-lm or GGUF LoRA) or a .gguf file", path.string());
    }
    return inspect_gguf_file(path);
  }
  return errorf("not_found", "{}: no such adapter file or folder", path.string());
}

Compatibility check_compatibility(const AvailableAdapter& adapter, const BaseModel& base) {
  if (!adapter.readable()) return {false, adapter.problem.empty() ? "unreadable" : adapter.problem};
  if (adapter.metadata && adapter.metadata->base_fingerprint != base.fingerprint) {
    const std::string made_for =
        adapter.metadata->base_repo.empty() ? "another model" : adapter.metadata->base_repo;
    return {false, fmt::format("made for {} (fingerprint {}), not {} (fingerprint {})", made_for,
                               short_fingerprint(adapter.metadata->base_fingerprint), base.label(),
                               short_fingerprint(base.fingerprint))};
  }
  Status fits = check_adapter_fits(*adapter.description, base);
  if (!fits) return {false, fits.error().message};
  return {true, ""};
}

Result<LoraAdapter> read_adapter_weights(const AvailableAdapter& adapter) {
  if (!adapter.readable()) return make_error("invalid_adapter", adapter.problem);
  const AdapterDescription& d = *adapter.description;
  if (d.format == AdapterFormat::peft) return read_peft(d.weights_path.parent_path());
  if (d.format == AdapterFormat::mlx) return read_mlx(d.weights_path.parent_path());
  return read_gguf_lora(d.weights_path);
}

Result<LoraWeights> read_mountable(const AvailableAdapter& adapter, const BaseModel& base) {
  Compatibility compat = check_compatibility(adapter, base);
  if (!compat.compatible) {
    return errorf(adapter.readable() ? "incompatible_adapter" : "invalid_adapter", "adapter '{}': {}",
                  adapter.id, compat.reason);
  }
  GRAFT_TRY(LoraAdapter weights, read_adapter_weights(adapter));
  if (adapter.description->format != AdapterFormat::gguf) {  // PEFT and mlx-lm: Hugging Face's order
    reorder_value_heads(weights, base, HeadOrder::peft_to_gguf);
  }
  // The files may have changed since they were described: check what was read.
  AdapterDescription read = *adapter.description;
  read.modules = modules_of(weights);
  GRAFT_TRY_STATUS(check_adapter_fits(read, base));
  return to_mountable(std::move(weights));
}

AdapterStore::AdapterStore(std::vector<fs::path> roots) : roots_(std::move(roots)) {
  for (fs::path& root : roots_) {
    std::error_code ec;
    fs::path absolute = fs::absolute(root, ec).lexically_normal();
    if (!ec) root = absolute;
  }
}

fs::path AdapterStore::user_store() {
  return data_dir() / "adapters";
}

AdapterStore AdapterStore::with_user_store(const std::vector<fs::path>& adapter_dirs) {
  std::vector<fs::path> roots{user_store()};
  roots.insert(roots.end(), adapter_dirs.begin(), adapter_dirs.end());
  AdapterStore store(std::move(roots));
  store.add_hub_cache(hf::default_hub_dir());
  return store;
}

void AdapterStore::add_hub_cache(fs::path hub) {
  std::error_code ec;
  fs::path absolute = fs::absolute(hub, ec).lexically_normal();
  hubs_.push_back(ec ? hub : absolute);
}

std::vector<AvailableAdapter> AdapterStore::scan() const {
  std::vector<AvailableAdapter> out;
  std::set<std::string> seen;
  for (const fs::path& root : roots_) {
    for (const fs::path& entry : sorted_entries(root)) {
      if (is_hidden(entry)) continue;
      std::error_code ec;
      const bool folder = fs::is_directory(entry, ec);
      if (!folder) {
        if (!has_extension(entry, ".gguf")) continue;
        auto file = GgufFile::open(entry.string());
        if (file && file->find_string("general.type").value_or("") != "adapter") continue;  // a model, say
      }
      auto adapter = folder ? inspect_folder(entry) : inspect_gguf_file(entry);
      if (!adapter) continue;  // a folder with no adapter files
      if (Status id_ok = validate_adapter_id(adapter->id); !id_ok && adapter->problem.empty()) {
        adapter->problem = id_ok.error().message;
      }
      if (!seen.insert(adapter->id).second) {
        GRAFT_LOG_WARN("adapter '{}' at {} is hidden by one of the same id found earlier", adapter->id,
                       adapter->path.string());
        continue;
      }
      out.push_back(std::move(adapter).value());
    }
  }
  for (const fs::path& hub : hubs_) {
    for (const hf::Snapshot& snapshot : hf::HubCache(hub).snapshots()) {
      auto adapter = hub_adapter(snapshot);
      if (!adapter) continue;
      if (!seen.insert(adapter->id).second) {
        GRAFT_LOG_WARN("adapter '{}' at {} is hidden by one of the same id found earlier", adapter->id,
                       adapter->path.string());
        continue;
      }
      out.push_back(std::move(*adapter));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

Result<AvailableAdapter> AdapterStore::find(std::string_view id) const {
  GRAFT_TRY_STATUS(validate_adapter_id(id));
  for (const fs::path& root : roots_) {
    std::error_code ec;
    const fs::path folder = root / std::string(id);
    if (fs::is_directory(folder, ec)) {
      auto adapter = inspect_folder(folder);
      if (adapter) return adapter;
    }
    const fs::path file = root / (std::string(id) + ".gguf");
    if (fs::is_regular_file(file, ec)) return inspect_gguf_file(file);
  }
  const size_t sep = id.find("--");
  if (auto repo = hf::parse_repo_id(sep == std::string_view::npos ? std::string(id)
                                                                  : std::string(id.substr(0, sep)) + "/" +
                                                                        std::string(id.substr(sep + 2)))) {
    for (const fs::path& hub : hubs_) {
      auto snapshot = hf::HubCache(hub).snapshot(*repo);
      if (!snapshot) continue;
      if (auto adapter = hub_adapter(*snapshot)) return std::move(*adapter);
    }
  }
  std::string where;
  for (const fs::path& root : roots_) where += (where.empty() ? "" : ", ") + root.string();
  for (const fs::path& hub : hubs_)
    where += (where.empty() ? "" : ", ") + ("the Hugging Face cache " + hub.string());
  return errorf("not_found", "no adapter '{}' in {}", id, where.empty() ? "(no adapter folders)" : where);
}

Result<fs::path> AdapterStore::confine(const fs::path& path) const {
  std::error_code ec;
  fs::path target = fs::weakly_canonical(fs::absolute(path, ec), ec).lexically_normal();
  if (target.has_parent_path() && target.filename().empty()) target = target.parent_path();
  if (!ec) {
    std::vector<fs::path> allowed = roots_;
    allowed.insert(allowed.end(), hubs_.begin(), hubs_.end());
    for (const fs::path& root : allowed) {
      std::error_code root_ec;
      fs::path base = fs::weakly_canonical(fs::absolute(root, root_ec), root_ec).lexically_normal();
      if (root_ec) continue;
      if (base.has_parent_path() && base.filename().empty()) base = base.parent_path();  // "dir/" -> "dir"
      auto [root_end, target_it] = std::mismatch(base.begin(), base.end(), target.begin(), target.end());
      if (root_end == base.end() && target != base) return target;
    }
  }
  return errorf("forbidden", "{} lies outside the adapter store and every --adapter-dir", path.string());
}

}  // namespace graft

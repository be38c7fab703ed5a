// The adapter store: the folders graft looks in for adapters (the "available"
// state). The user's store is $XDG_DATA_HOME/graft/adapters (else
// ~/.local/share/graft/adapters), followed by every --adapter-dir (graft
// serve adds an adapters/ folder beside the model file), then adapter repos
// in the Hugging Face cache: a cached repo whose snapshot holds PEFT files or
// one GGUF LoRA is an adapter with the id "org--name".
//
// In a store folder, an adapter is either a sub-folder (its name is the id)
// holding PEFT files, mlx-lm files or one GGUF LoRA file, plus optionally graft_adapter.json;
// or a GGUF LoRA file "<id>.gguf" with optional "<id>.graft_adapter.json"
// beside it. Hidden entries are skipped (temporary folders of atomic writes).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "adapters/base_model.h"
#include "adapters/lora_adapter.h"
#include "adapters/metadata.h"

namespace graft {

// Ids are 1-128 characters of [A-Za-z0-9._-], starting with a letter or
// digit: never a path, never containing the spec separators '+' and '@'.
Status validate_adapter_id(std::string_view id);

// An adapter found on disk. When its files cannot be read, `problem` says
// why (and description/metadata may be empty): it is listed, never loaded.
struct AvailableAdapter {
  std::string id;
  fs::path path;           // the adapter's folder, or its .gguf file
  fs::path metadata_path;  // graft_adapter.json, whether or not it exists yet
  std::optional<AdapterDescription> description;
  std::optional<AdapterMetadata> metadata;
  std::string problem;

  bool readable() const { return problem.empty() && description.has_value(); }
};

// Reads an adapter at a path (a folder or a .gguf file) without its weights.
// The id is the folder name or the file's stem.
Result<AvailableAdapter> inspect_adapter(const fs::path& path);

// Whether an adapter suits a base model, and why not.
struct Compatibility {
  bool compatible = false;
  std::string reason;  // empty when compatible
};

// Stamped adapters must carry the base's fingerprint; unstamped ones are
// judged by their tensor shapes. Both must fit the base's shapes.
Compatibility check_compatibility(const AvailableAdapter& adapter, const BaseModel& base);

// Reads the weights, checks that they fit the base, and prepares them for
// Model::mount_lora. Errors ("invalid_adapter", "incompatible_adapter") say why.
// The weights stay in place in the file's mapping until they are mounted.
Result<LoraWeights> read_mountable(const AvailableAdapter& adapter, const BaseModel& base);
// Reads the weights as stored (for writing them in another format).
Result<LoraAdapter> read_adapter_weights(const AvailableAdapter& adapter);

class AdapterStore {
 public:
  // Roots in priority order: an id found in an earlier root hides later ones.
  // Relative roots are made absolute (paths in listings are absolute).
  explicit AdapterStore(std::vector<fs::path> roots);
  // The user's store first, then `adapter_dirs`, then the Hugging Face cache.
  static AdapterStore with_user_store(const std::vector<fs::path>& adapter_dirs);
  static fs::path user_store();
  // Also finds adapters among the repos of a Hugging Face hub cache (after the roots).
  void add_hub_cache(fs::path hub);

  const std::vector<fs::path>& roots() const { return roots_; }
  const std::vector<fs::path>& hub_caches() const { return hubs_; }

  // Every adapter in every root (missing roots are skipped), sorted by id.
  std::vector<AvailableAdapter> scan() const;
  // The adapter with this id; "invalid_argument" for a malformed id,
  // "not_found" naming the id otherwise.
  Result<AvailableAdapter> find(std::string_view id) const;
  // The canonical path if `path` lies inside one of the roots (symlinks
  // resolved); a "forbidden" error otherwise.
  Result<fs::path> confine(const fs::path& path) const;

 private:
  std::vector<fs::path> roots_;
  std::vector<fs::path> hubs_;
};

}  // namespace graft

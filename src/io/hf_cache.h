// The Hugging Face hub cache, as huggingface_hub lays it out, so graft and
// other tools share downloaded files:
//   <hub>/models--<org>--<name>/blobs/<etag>              file contents (etag: sha256 for LFS files)
//   <hub>/models--<org>--<name>/blobs/<etag>.incomplete   a download in progress
//   <hub>/models--<org>--<name>/snapshots/<commit>/<file> relative symlink to ../../blobs/<etag>
//   <hub>/models--<org>--<name>/refs/<revision>           the commit a branch or tag names
// <hub> is $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub,
// else ~/.cache/huggingface/hub.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/files.h"
#include "util/result.h"

namespace graft::hf {

fs::path default_hub_dir();

// "org/name" (or a bare "name", as older repos are named).
struct RepoId {
  std::string org;
  std::string name;
  std::string str() const { return org.empty() ? name : org + "/" + name; }
  std::string folder() const { return "models--" + (org.empty() ? name : org + "--" + name); }
};
Result<RepoId> parse_repo_id(std::string_view text);

// "org/name[:file]": a model in the cache (file: a path inside the repo).
struct ModelRef {
  RepoId repo;
  std::string file;
};
// Whether a command-line model argument names a repo rather than a file:
// "org/name" or "org/name:file.gguf", and no such path exists.
bool looks_like_repo(std::string_view text);
Result<ModelRef> parse_model_ref(std::string_view text);

// A repo's snapshot as the cache holds it.
struct Snapshot {
  RepoId repo;
  std::string commit;
  fs::path dir;
  std::vector<std::string> files;  // paths inside the repo, sorted
};

class HubCache {
 public:
  explicit HubCache(fs::path dir = default_hub_dir());
  const fs::path& dir() const { return dir_; }

  fs::path repo_dir(const RepoId& repo) const { return dir_ / repo.folder(); }
  // The snapshot a revision names: refs/<revision> holds its commit; a
  // 40-hex revision is a commit itself; without refs, a repo's only snapshot.
  Result<Snapshot> snapshot(const RepoId& repo, const std::string& revision = "main") const;
  // Every model repo's snapshot of "main" (or its only one), sorted by repo.
  std::vector<Snapshot> snapshots() const;
  // The GGUF file a reference names: its file, else the repo's only
  // model GGUF. Errors say what the cache holds instead.
  Result<fs::path> resolve_gguf(const ModelRef& ref) const;

  // Writing (graft pull).
  fs::path blob_path(const RepoId& repo, const std::string& etag) const;
  fs::path incomplete_path(const RepoId& repo, const std::string& etag) const;
  // snapshots/<commit>/<file> -> the blob, as a relative symlink (replacing any).
  Status link_snapshot(const RepoId& repo, const std::string& commit, const std::string& file,
                       const std::string& etag) const;
  // refs/<revision> = commit (atomically); nothing for a revision that is a commit.
  Status write_ref(const RepoId& repo, const std::string& revision, const std::string& commit) const;

 private:
  fs::path dir_;
};

bool is_commit_hash(std::string_view text);

}  // namespace graft::hf

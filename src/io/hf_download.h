// graft pull: downloads a repo's files from the Hugging Face hub (or a
// mirror) into the hub cache (io/hf_cache.h), as huggingface_hub does, so
// other tools share them. Each file goes to blobs/<etag>.incomplete first
// (a later run resumes it with a Range request), is checked against the
// hub's metadata (size, and the sha256 the hub gives as an LFS file's etag),
// and only then is renamed into place and linked from the snapshot: nothing
// half-written is ever left looking complete.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/hf_cache.h"

namespace graft::hf {

// $HF_ENDPOINT, else https://huggingface.co.
std::string default_endpoint();
// $HF_TOKEN, else $HUGGING_FACE_HUB_TOKEN, else "".
std::string default_token();

struct PullOptions {
  std::string endpoint = default_endpoint();
  std::string token = default_token();
  std::string revision = "main";
  std::vector<std::string> include;  // glob patterns on the repo's file paths; empty: every file
  int retries = 3;                   // per file, after a cut connection (each retry resumes)
  long connect_timeout_s = 30;
  long stall_timeout_s = 60;  // a transfer slower than 1 KiB/s this long counts as cut
  // Called while a file downloads (done and total in bytes; total 0: unknown).
  std::function<void(const std::string& file, int64_t done, int64_t total)> progress;
  // Called once per file when it is in place.
  std::function<void(const std::string& file, int64_t bytes, bool was_cached)> finished;
};

struct PulledFile {
  std::string file;  // path inside the repo
  fs::path path;     // in the snapshot
  int64_t bytes = 0;
  std::string etag;
  bool sha256_checked = false;  // false: a small (non-LFS) file, checked by size only
  bool was_cached = false;
};

struct PullResult {
  std::string commit;
  fs::path snapshot;
  std::vector<PulledFile> files;
};

// Errors: "unauthorized" (401/403: set HF_TOKEN), "not_found" (404, or no
// file matches --include), "network" (unreachable, or cut more times than
// `retries`: run again to resume), "checksum" (the file's sha256 or size is
// not the hub's; the partial file is removed), "io_error".
Result<PullResult> pull(const HubCache& cache, const RepoId& repo, const PullOptions& options);

// Whether a repo path matches a glob pattern ('*', '?', '[...]'; '*' also
// crosses '/', as the hub's own allow patterns do).
bool glob_match(const std::string& pattern, const std::string& path);

}  // namespace graft::hf

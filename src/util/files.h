// Files and folders: whole-file reads, atomic writes, graft's per-user folders.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "util/result.h"

namespace graft {

namespace fs = std::filesystem;

Result<std::string> read_file(const fs::path& path);

// Writes `data` to a temporary file beside `path`, flushes it, then renames it
// over `path`: readers see the old content or the new, never half.
Status write_file_atomic(const fs::path& path, std::string_view data);

// $XDG_CACHE_HOME/graft, else ~/.cache/graft (not created).
fs::path cache_dir();
// $XDG_DATA_HOME/graft, else ~/.local/share/graft (not created).
fs::path data_dir();

// A fresh, empty temporary folder removed when the object dies.
class TempDir {
 public:
  explicit TempDir(std::string_view prefix = "graft");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

}  // namespace graft

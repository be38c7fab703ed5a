// Uploaded training files (OpenAI's /v1/files, purpose "fine-tune"): each is
// checked to be JSONL, written atomically as <folder>/<id>.jsonl with its
// sha256, and recorded in the job store.
#pragma once

#include <string>
#include <string_view>

#include "train/job_store.h"

namespace graft {

// The rows of a JSONL text: every non-blank line must be one JSON object.
// Errors ("invalid_file") name the first bad line, 1-based.
Result<int64_t> check_jsonl(std::string_view content);

class FileStore {
 public:
  FileStore(JobStore& store, fs::path folder) : store_(store), folder_(std::move(folder)) {}

  const fs::path& folder() const { return folder_; }
  // Checks, writes and records an upload. "invalid_file" names what is wrong.
  Result<FileRecord> add(std::string_view filename, std::string_view purpose, std::string_view content);
  // Forgets a file and deletes its bytes; "conflict" while an active job uses it.
  Result<FileRecord> remove(std::string_view id);

 private:
  JobStore& store_;
  fs::path folder_;
};

}  // namespace graft

#include "train/job_files.h"

#include <fmt/format.h>

#include "util/hash.h"
#include "util/log.h"

namespace graft {

namespace {

bool blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

}  // namespace

Result<int64_t> check_jsonl(std::string_view content) {
  int64_t rows = 0;
  int64_t line_number = 0;
  size_t start = 0;
  while (start < content.size()) {
    size_t end = content.find('\n', start);
    if (end == std::string_view::npos) end = content.size();
    std::string_view line = content.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (blank(line)) continue;
    json row;
    try {
      row = json::parse(line.begin(), line.end());
    } catch (const json::parse_error& e) {
      std::string why = e.what();
      const auto at = why.find("parse error");
      if (at != std::string::npos) why = why.substr(at);
      return errorf("invalid_file", "the file is not JSONL: line {} is not valid JSON ({})", line_number,
                    why);
    }
    if (!row.is_object()) {
      return errorf("invalid_file",
                    "the file is not JSONL of training examples: line {} is a JSON {}, not an object",
                    line_number, row.type_name());
    }
    ++rows;
  }
  if (rows == 0) return make_error("invalid_file", "the file has no rows: expected one JSON object per line");
  return rows;
}

Result<FileRecord> FileStore::add(std::string_view filename, std::string_view purpose,
                                  std::string_view content) {
  GRAFT_TRY(int64_t rows, check_jsonl(content));
  FileRecord f;
  f.id = new_id("file-");
  f.filename = std::string(filename);
  f.purpose = std::string(purpose);
  f.bytes = static_cast<int64_t>(content.size());
  f.sha256 = sha256_hex(content);
  f.rows = rows;
  f.path = folder_ / (f.id + ".jsonl");
  f.created_at = unix_now();
  std::error_code ec;
  fs::create_directories(folder_, ec);
  if (ec) return errorf("io_error", "cannot create {}: {}", folder_.string(), ec.message());
  GRAFT_TRY_STATUS(write_file_atomic(f.path, content));
  if (Status added = store_.add_file(f); !added) {
    fs::remove(f.path, ec);
    return added.error();
  }
  GRAFT_LOG_INFO("stored file {} ({}, {} bytes, {} rows, sha256 {})", f.id, f.filename, f.bytes, f.rows,
                 f.sha256);
  return f;
}

Result<FileRecord> FileStore::remove(std::string_view id) {
  GRAFT_TRY(FileRecord f, store_.remove_file(id));
  std::error_code ec;
  fs::remove(f.path, ec);
  if (ec) GRAFT_LOG_WARN("cannot delete {}: {}", f.path.string(), ec.message());
  return f;
}

}  // namespace graft

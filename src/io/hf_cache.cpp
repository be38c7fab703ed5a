#include "io/hf_cache.h"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "io/gguf_file.h"

namespace graft::hf {

namespace {

bool valid_part(std::string_view s) {
  if (s.empty() || s.size() > 96 || s == "." || s == "..") return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : "";
}

// Paths of the files of a snapshot folder, relative and sorted.
std::vector<std::string> list_files(const fs::path& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (fs::is_directory(it->path(), type_ec)) continue;  // follows links: a linked file is a file
    files.push_back(it->path().lexically_relative(dir).generic_string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// A GGUF file of the snapshot that holds a model: not a vision projector
// (many repos carry one beside the model) and not a LoRA adapter.
bool is_model_gguf(const fs::path& dir, const std::string& file) {
  if (file.size() < 5 || file.compare(file.size() - 5, 5, ".gguf") != 0) return false;
  if (fs::path(file).filename().string().rfind("mmproj", 0) == 0) return false;
  auto gguf = GgufFile::open((dir / file).string());
  return !gguf || gguf->find_string("general.type").value_or("model") != "adapter";
}

}  // namespace

fs::path default_hub_dir() {
  if (std::string v = env("HF_HUB_CACHE"); !v.empty()) return v;
  if (std::string v = env("HF_HOME"); !v.empty()) return fs::path(v) / "hub";
  if (std::string v = env("XDG_CACHE_HOME"); !v.empty()) return fs::path(v) / "huggingface" / "hub";
  const std::string home = env("HOME");
  return fs::path(home.empty() ? "/" : home) / ".cache" / "huggingface" / "hub";
}

bool is_commit_hash(std::string_view text) {
  return text.size() == 40 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

Result<RepoId> parse_repo_id(std::string_view text) {
  const size_t slash = text.find('/');
  RepoId id;
  if (slash == std::string_view::npos) {
    id.name = std::string(text);
  } else {
    id.org = std::string(text.substr(0, slash));
    id.name = std::string(text.substr(slash + 1));
  }
  const bool ok = valid_part(id.name) && (slash == std::string_view::npos || valid_part(id.org)) &&
                  id.name.find("--") == std::string::npos && id.org.find("--") == std::string::npos;
  if (!ok) {
    return errorf("invalid_argument",
                  "'{}' is not a Hugging Face repo id: use org/name (letters, digits, '-', '_', '.')", text);
  }
  return id;
}

bool looks_like_repo(std::string_view text) {
  if (text.empty() || text[0] == '/' || text[0] == '.' || text[0] == '~') return false;
  std::error_code ec;
  if (fs::exists(fs::path(std::string(text)), ec)) return false;
  const std::string_view repo = text.substr(0, text.find(':'));
  return std::count(repo.begin(), repo.end(), '/') == 1 && parse_repo_id(repo).ok();
}

Result<ModelRef> parse_model_ref(std::string_view text) {
  ModelRef ref;
  const size_t colon = text.find(':');
  GRAFT_TRY(ref.repo, parse_repo_id(text.substr(0, colon)));
  if (colon != std::string_view::npos) {
    ref.file = std::string(text.substr(colon + 1));
    const fs::path p(ref.file);
    if (ref.file.empty() || p.is_absolute() ||
        std::any_of(p.begin(), p.end(), [](const fs::path& part) { return part == ".."; })) {
      return errorf("invalid_argument", "'{}': the file after ':' must be a path inside the repo", text);
    }
  }
  return ref;
}

HubCache::HubCache(fs::path dir) : dir_(std::move(dir)) {}

Result<Snapshot> HubCache::snapshot(const RepoId& repo, const std::string& revision) const {
  const fs::path root = repo_dir(repo);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return errorf("not_found", "{} is not in the Hugging Face cache ({}): run graft pull {}", repo.str(),
                  dir_.string(), repo.str());
  }
  Snapshot s;
  s.repo = repo;
  if (is_commit_hash(revision)) {
    s.commit = revision;
  } else if (auto ref = read_file(root / "refs" / revision)) {
    s.commit = *ref;
    while (!s.commit.empty() && std::isspace(static_cast<unsigned char>(s.commit.back())))
      s.commit.pop_back();
  } else {
    std::vector<std::string> commits;
    for (fs::directory_iterator it(root / "snapshots", ec), end; !ec && it != end; it.increment(ec)) {
      commits.push_back(it->path().filename().string());
    }
    if (commits.size() != 1) {
      return errorf("not_found", "{} has no refs/{} and {} snapshots in {}: give a commit", repo.str(),
                    revision, commits.size(), root.string());
    }
    s.commit = commits[0];
  }
  s.dir = root / "snapshots" / s.commit;
  if (!fs::is_directory(s.dir, ec)) {
    return errorf("not_found", "{}: revision {} names commit {}, whose snapshot {} is missing", repo.str(),
                  revision, s.commit, s.dir.string());
  }
  s.files = list_files(s.dir);
  return s;
}

std::vector<Snapshot> HubCache::snapshots() const {
  std::vector<Snapshot> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string folder = it->path().filename().string();
    if (folder.rfind("models--", 0) != 0) continue;
    const std::string rest = folder.substr(8);
    const size_t sep = rest.find("--");
    RepoId id;
    if (sep == std::string::npos) {
      id.name = rest;
    } else {
      id.org = rest.substr(0, sep);
      id.name = rest.substr(sep + 2);
    }
    if (auto s = snapshot(id)) out.push_back(std::move(*s));
  }
  std::sort(out.begin(), out.end(),
            [](const Snapshot& a, const Snapshot& b) { return a.repo.str() < b.repo.str(); });
  return out;
}

Result<fs::path> HubCache::resolve_gguf(const ModelRef& ref) const {
  GRAFT_TRY(Snapshot s, snapshot(ref.repo));
  std::vector<std::string> ggufs;
  for (const std::string& f : s.files) {
    if (is_model_gguf(s.dir, f)) ggufs.push_back(f);
  }
  auto listing = [&] {
    std::string text;
    for (const std::string& f : ggufs) text += (text.empty() ? "" : ", ") + f;
    return text.empty() ? std::string("no GGUF files") : text;
  };
  if (!ref.file.empty()) {
    if (std::find(s.files.begin(), s.files.end(), ref.file) == s.files.end()) {
      return errorf("not_found",
                    "{} has no file '{}' in the cache (it has {}): run graft pull {} --include '{}'",
                    ref.repo.str(), ref.file, listing(), ref.repo.str(), ref.file);
    }
    std::error_code ec;
    if (!fs::exists(s.dir / ref.file, ec)) {
      return errorf("not_found", "{}: '{}' links to a missing blob: run graft pull {} again", ref.repo.str(),
                    ref.file, ref.repo.str());
    }
    return s.dir / ref.file;
  }
  if (ggufs.size() != 1) {
    return errorf("invalid_argument", "{} holds {} in the cache: name one as {}:FILE", ref.repo.str(),
                  listing(), ref.repo.str());
  }
  return s.dir / ggufs[0];
}

fs::path HubCache::blob_path(const RepoId& repo, const std::string& etag) const {
  return repo_dir(repo) / "blobs" / etag;
}

fs::path HubCache::incomplete_path(const RepoId& repo, const std::string& etag) const {
  return repo_dir(repo) / "blobs" / (etag + ".incomplete");
}

Status HubCache::link_snapshot(const RepoId& repo, const std::string& commit, const std::string& file,
                               const std::string& etag) const {
  const fs::path link = repo_dir(repo) / "snapshots" / commit / file;
  std::error_code ec;
  fs::create_directories(link.parent_path(), ec);
  if (ec) return errorf("io_error", "cannot create {}: {}", link.parent_path().string(), ec.message());
  const fs::path target = blob_path(repo, etag).lexically_relative(link.parent_path());
  // A fresh link beside the old one, renamed over it: never a moment without one.
  std::string tmp_name = link.filename().string();
  tmp_name.insert(0, 1, '.');
  tmp_name += ".link";
  const fs::path tmp = link.parent_path() / tmp_name;
  fs::remove(tmp, ec);
  fs::create_symlink(target, tmp, ec);
  if (ec) return errorf("io_error", "cannot link {} to {}: {}", link.string(), target.string(), ec.message());
  fs::rename(tmp, link, ec);
  if (ec) return errorf("io_error", "cannot rename {} to {}: {}", tmp.string(), link.string(), ec.message());
  return {};
}

Status HubCache::write_ref(const RepoId& repo, const std::string& revision, const std::string& commit) const {
  if (is_commit_hash(revision)) return {};
  const fs::path ref = repo_dir(repo) / "refs" / revision;
  std::error_code ec;
  fs::create_directories(ref.parent_path(), ec);
  if (ec) return errorf("io_error", "cannot create {}: {}", ref.parent_path().string(), ec.message());
  return write_file_atomic(ref, commit);
}

}  // namespace graft::hf

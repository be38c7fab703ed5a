#include "io/hf_download.h"

#include <curl/curl.h>
#include <fnmatch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/hash.h"

namespace graft::hf {

namespace {

using json = nlohmann::json;

void init_curl() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Response {
  long status = 0;
  std::map<std::string, std::string> headers;  // lower-case names; of the last response when redirected
  std::string body;
  CURLcode code = CURLE_OK;
  std::string error;  // curl's message when code != CURLE_OK

  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* r = static_cast<Response*>(user);
  std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) r->headers.clear();  // a new response (after a redirect)
  const size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string key = line.substr(0, colon);
    std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::tolower(c); });
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' '))
      value.pop_back();
    r->headers[key] = value;
  }
  return size * n;
}

size_t to_string(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

class Request {
 public:
  Request(const std::string& url, const PullOptions& o) : curl_(curl_easy_init()) {
    curl_easy_setopt(curl_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl_, CURLOPT_USERAGENT, "graft/0.1");
    curl_easy_setopt(curl_, CURLOPT_CONNECTTIMEOUT, o.connect_timeout_s);
    curl_easy_setopt(curl_, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(curl_, CURLOPT_LOW_SPEED_TIME, o.stall_timeout_s);
    curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl_, CURLOPT_ERRORBUFFER, error_);
    curl_easy_setopt(curl_, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl_, CURLOPT_HEADERDATA, &response_);
    // The token goes to the hub only: curl drops custom Authorization
    // headers when a redirect leaves the host (e.g. for a CDN).
    if (!o.token.empty())
      headers_ = curl_slist_append(headers_, ("Authorization: Bearer " + o.token).c_str());
    headers_ = curl_slist_append(headers_, "Accept-Encoding: identity");
    curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers_);
  }
  ~Request() {
    curl_slist_free_all(headers_);
    curl_easy_cleanup(curl_);
  }
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  CURL* handle() { return curl_; }
  Response& perform() {
    error_[0] = 0;
    response_.code = curl_easy_perform(curl_);
    curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &response_.status);
    if (response_.code != CURLE_OK) response_.error = error_[0] ? error_ : curl_easy_strerror(response_.code);
    return response_;
  }
  Response& response() { return response_; }

 private:
  CURL* curl_;
  curl_slist* headers_ = nullptr;
  char error_[CURL_ERROR_SIZE] = {};
  Response response_;
};

std::string escape_path(const std::string& path) {
  std::string out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    char* part = curl_easy_escape(nullptr, path.data() + start, int(end - start));
    out += part;
    curl_free(part);
    if (end < path.size()) out += '/';
    start = end + 1;
  }
  return out;
}

std::string unquote_etag(std::string etag) {
  if (etag.rfind("W/", 0) == 0) etag.erase(0, 2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  return etag;
}

bool is_sha256(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// An error for an HTTP status that is not success.
Error http_error(long status, const std::string& what, const RepoId& repo, const PullOptions& o) {
  if (status == 401 || status == 403) {
    return errorf("unauthorized", "{}: the hub refused access to {} (HTTP {}){}", repo.str(), what, status,
                  o.token.empty()
                      ? ": the repo may be private or gated, or may not exist: set HF_TOKEN to a token "
                        "that can read it"
                      : ": check that HF_TOKEN can read this repo");
  }
  if (status == 404)
    return errorf("not_found", "{}: {} not found on {} (HTTP 404)", repo.str(), what, o.endpoint);
  return errorf("network", "{}: {} answered HTTP {}", repo.str(), what, status);
}

Error network_error(const Response& r, const std::string& what, const PullOptions& o) {
  return errorf("network", "cannot fetch {} from {}: {}", what, o.endpoint, r.error);
}

struct RepoInfo {
  std::string commit;
  std::vector<std::string> files;
};

Result<RepoInfo> repo_info(const RepoId& repo, const PullOptions& o) {
  Request req(fmt::format("{}/api/models/{}/revision/{}", o.endpoint, repo.str(), escape_path(o.revision)),
              o);
  std::string body;
  curl_easy_setopt(req.handle(), CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(req.handle(), CURLOPT_WRITEFUNCTION, to_string);
  curl_easy_setopt(req.handle(), CURLOPT_WRITEDATA, &body);
  const Response& r = req.perform();
  const std::string what = fmt::format("revision '{}'", o.revision);
  if (r.code != CURLE_OK) return network_error(r, "the repo's file list", o);
  if (r.status != 200) return http_error(r.status, what, repo, o);
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("sha") || !j["sha"].is_string() ||
      !j.contains("siblings") || !j["siblings"].is_array()) {
    return errorf("network", "{}: the hub's answer for {} is not a model description", repo.str(), what);
  }
  RepoInfo info;
  info.commit = j["sha"].get<std::string>();
  if (!is_commit_hash(info.commit))
    return errorf("network", "{}: the hub gave '{}' as the commit", repo.str(), info.commit);
  for (const json& s : j["siblings"]) {
    if (s.is_object() && s.contains("rfilename") && s["rfilename"].is_string()) {
      info.files.push_back(s["rfilename"].get<std::string>());
    }
  }
  return info;
}

struct FileMeta {
  std::string etag;
  int64_t size = -1;  // -1: unknown
  std::string url;    // where the content is (after the hub's redirect)
};

Result<FileMeta> file_meta(const RepoId& repo, const std::string& commit, const std::string& file,
                           const PullOptions& o) {
  const std::string url =
      fmt::format("{}/{}/resolve/{}/{}", o.endpoint, repo.str(), commit, escape_path(file));
  Request req(url, o);
  curl_easy_setopt(req.handle(), CURLOPT_NOBODY, 1L);
  curl_easy_setopt(req.handle(), CURLOPT_FOLLOWLOCATION, 0L);
  const Response& r = req.perform();
  if (r.code != CURLE_OK) return network_error(r, "'" + file + "'", o);
  if (r.status >= 400 || r.status < 200) return http_error(r.status, "'" + file + "'", repo, o);
  FileMeta m;
  m.etag = unquote_etag(r.header("x-linked-etag"));
  if (m.etag.empty()) m.etag = unquote_etag(r.header("etag"));
  if (m.etag.empty() || m.etag.find('/') != std::string::npos || m.etag.find("..") != std::string::npos) {
    return errorf("network", "{}: the hub gave no usable etag for '{}'", repo.str(), file);
  }
  std::string size = r.header("x-linked-size");
  if (size.empty() && r.status == 200) size = r.header("content-length");
  if (!size.empty()) m.size = std::strtoll(size.c_str(), nullptr, 10);
  m.url = url;
  if (r.status >= 300 && r.status < 400) {
    const std::string location = r.header("location");
    if (location.empty())
      return errorf("network", "{}: a redirect for '{}' without a location", repo.str(), file);
    if (location.find("://") != std::string::npos) {
      m.url = location;
    } else {
      // Relative: against the endpoint's scheme and host.
      const size_t host_end = o.endpoint.find('/', o.endpoint.find("://") + 3);
      m.url = o.endpoint.substr(0, host_end) + (location[0] == '/' ? "" : "/") + location;
    }
  }
  return m;
}

Result<std::string> sha256_of(const fs::path& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return errorf("io_error", "cannot read {}", path.string());
  Sha256 hash;
  std::vector<char> buffer(size_t(1) << 20);
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), f)) > 0) hash.update(buffer.data(), n);
  const bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) return errorf("io_error", "cannot read {}", path.string());
  return hash.hex_digest();
}

int64_t file_size_or_zero(const fs::path& p) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);
  return ec ? 0 : int64_t(n);
}

// One attempt: appends to `partial` from its current size. Ok: the server
// sent the rest. "network" errors leave the partial file for a retry.
Status fetch_rest(const FileMeta& meta, const fs::path& partial, const std::string& file, const RepoId& repo,
                  const PullOptions& o) {
  int64_t have = file_size_or_zero(partial);
  if (meta.size >= 0 && have > meta.size) {
    fs::remove(partial);
    have = 0;
  }
  if (meta.size >= 0 && have == meta.size && have > 0) return {};
  Request req(meta.url, o);
  curl_easy_setopt(req.handle(), CURLOPT_FOLLOWLOCATION, 1L);
  if (have > 0) curl_easy_setopt(req.handle(), CURLOPT_RANGE, fmt::format("{}-", have).c_str());
  // The file opens at the first byte of the body, once the status says
  // whether to append (206), start over (200: the server ignored the
  // range), or stop (an error page is never written).
  struct Sink {
    const fs::path* partial;
    int64_t have;
    CURL* curl;
    std::FILE* out = nullptr;
    bool refused = false;
  } sink{&partial, have, req.handle()};
  auto write = +[](char* data, size_t size, size_t n, void* user) -> size_t {
    auto* s = static_cast<Sink*>(user);
    if (!s->out) {
      long status = 0;
      curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);
      if (status != 200 && status != 206) {
        s->refused = true;
        return 0;
      }
      s->out = std::fopen(s->partial->c_str(), status == 206 && s->have > 0 ? "ab" : "wb");
      if (!s->out) return 0;
    }
    return std::fwrite(data, 1, size * n, s->out);
  };
  curl_easy_setopt(req.handle(), CURLOPT_WRITEFUNCTION, write);
  curl_easy_setopt(req.handle(), CURLOPT_WRITEDATA, &sink);
  struct Progress {
    const PullOptions* o;
    const std::string* file;
    int64_t have;
    int64_t total;
  } progress{&o, &file, have, meta.size};
  if (o.progress) {
    curl_easy_setopt(req.handle(), CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(
        req.handle(), CURLOPT_XFERINFOFUNCTION,
        +[](void* user, curl_off_t, curl_off_t now, curl_off_t, curl_off_t) -> int {
          auto* p = static_cast<Progress*>(user);
          p->o->progress(*p->file, p->have + int64_t(now), std::max<int64_t>(p->total, 0));
          return 0;
        });
    curl_easy_setopt(req.handle(), CURLOPT_XFERINFODATA, &progress);
  }
  const Response& r = req.perform();
  if (sink.out && std::fclose(sink.out) != 0) return errorf("io_error", "cannot write {}", partial.string());
  if (sink.refused || (r.code == CURLE_OK && r.status != 200 && r.status != 206)) {
    if (r.status == 416) {  // our range lies beyond the file: start over
      fs::remove(partial);
      return errorf("network", "{}: the server refused to resume '{}'; starting over", repo.str(), file);
    }
    return http_error(r.status, "'" + file + "'", repo, o);
  }
  if (r.code != CURLE_OK) {
    return errorf("network", "{}: the download of '{}' broke off after {} bytes: {}", repo.str(), file,
                  file_size_or_zero(partial), r.error);
  }
  if (!sink.out && have == 0) {  // an empty file
    std::FILE* f = std::fopen(partial.c_str(), "wb");
    if (!f || std::fclose(f) != 0) return errorf("io_error", "cannot write {}", partial.string());
  }
  return {};
}

Result<PulledFile> pull_file(const HubCache& cache, const RepoId& repo, const std::string& commit,
                             const std::string& file, const PullOptions& o) {
  GRAFT_TRY(FileMeta meta, file_meta(repo, commit, file, o));
  PulledFile out;
  out.file = file;
  out.etag = meta.etag;
  out.path = cache.repo_dir(repo) / "snapshots" / commit / file;
  const fs::path blob = cache.blob_path(repo, meta.etag);
  const bool sha = is_sha256(meta.etag);
  std::error_code ec;
  fs::create_directories(blob.parent_path(), ec);
  if (ec) return errorf("io_error", "cannot create {}: {}", blob.parent_path().string(), ec.message());
  if (fs::exists(blob, ec) && (meta.size < 0 || file_size_or_zero(blob) == meta.size)) {
    out.was_cached = true;
  } else {
    const fs::path partial = cache.incomplete_path(repo, meta.etag);
    Status got;
    for (int attempt = 0; attempt <= std::max(0, o.retries); ++attempt) {
      got = fetch_rest(meta, partial, file, repo, o);
      if (got || got.error().code != "network") break;
    }
    if (!got) {
      if (got.error().code == "network") {
        return errorf("network", "{} ({} of its bytes are kept: run the same command again to resume)",
                      got.error().message, file_size_or_zero(partial));
      }
      return got.error();
    }
    const int64_t size = file_size_or_zero(partial);
    if (meta.size >= 0 && size != meta.size) {
      fs::remove(partial, ec);
      return errorf("checksum", "{}: '{}' has {} bytes, the hub says {}; the partial file was removed",
                    repo.str(), file, size, meta.size);
    }
    if (sha) {
      GRAFT_TRY(std::string digest, sha256_of(partial));
      if (digest != meta.etag) {
        fs::remove(partial, ec);
        return errorf("checksum", "{}: the sha256 of '{}' is {}, the hub says {}; the download was removed",
                      repo.str(), file, digest, meta.etag);
      }
    }
    fs::rename(partial, blob, ec);
    if (ec)
      return errorf("io_error", "cannot rename {} to {}: {}", partial.string(), blob.string(), ec.message());
  }
  out.sha256_checked = sha;
  out.bytes = file_size_or_zero(blob);
  GRAFT_TRY_STATUS(cache.link_snapshot(repo, commit, file, meta.etag));
  if (o.finished) o.finished(file, out.bytes, out.was_cached);
  return out;
}

}  // namespace

std::string default_endpoint() {
  const char* v = std::getenv("HF_ENDPOINT");
  std::string e = v && *v ? v : "https://huggingface.co";
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

std::string default_token() {
  for (const char* name : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}) {
    const char* v = std::getenv(name);
    if (v && *v) return v;
  }
  return "";
}

bool glob_match(const std::string& pattern, const std::string& path) {
  return ::fnmatch(pattern.c_str(), path.c_str(), 0) == 0;
}

Result<PullResult> pull(const HubCache& cache, const RepoId& repo, const PullOptions& options) {
  init_curl();
  PullOptions o = options;
  while (!o.endpoint.empty() && o.endpoint.back() == '/') o.endpoint.pop_back();
  GRAFT_TRY(RepoInfo info, repo_info(repo, o));
  std::vector<std::string> files;
  for (const std::string& f : info.files) {
    const bool wanted =
        o.include.empty() || std::any_of(o.include.begin(), o.include.end(),
                                         [&](const std::string& p) { return glob_match(p, f); });
    if (wanted) files.push_back(f);
  }
  if (files.empty()) {
    std::string have;
    for (size_t i = 0; i < info.files.size() && i < 20; ++i) have += (i ? ", " : "") + info.files[i];
    if (info.files.size() > 20) have += fmt::format(", ... ({} files)", info.files.size());
    return errorf(
        "not_found", "{}: no file matches {}; the repo has {}", repo.str(),
        o.include.empty() ? std::string("(nothing)") : fmt::format("'{}'", fmt::join(o.include, "', '")),
        have.empty() ? std::string("no files") : have);
  }
  PullResult result;
  result.commit = info.commit;
  result.snapshot = cache.repo_dir(repo) / "snapshots" / info.commit;
  for (const std::string& f : files) {
    GRAFT_TRY(PulledFile pulled, pull_file(cache, repo, info.commit, f, o));
    result.files.push_back(std::move(pulled));
  }
  GRAFT_TRY_STATUS(cache.write_ref(repo, o.revision, info.commit));
  return result;
}

}  // namespace graft::hf

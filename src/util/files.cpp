#include "util/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>

namespace graft {

Result<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return errorf("not_found", "cannot open {}: {}", path.string(), std::strerror(errno));
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return errorf("io_error", "cannot read {}", path.string());
  return data;
}

Status write_file_atomic(const fs::path& path, std::string_view data) {
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errorf("io_error", "cannot create {}: {}", tmp.string(), std::strerror(errno));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return errorf("io_error", "cannot write {}: {}", tmp.string(), std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return errorf("io_error", "cannot flush {}", tmp.string());
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return errorf("io_error", "cannot rename {} to {}: {}", tmp.string(), path.string(), std::strerror(err));
  }
  return {};
}

static fs::path home_dir() {
  const char* home = std::getenv("HOME");
  return home && *home ? fs::path(home) : fs::temp_directory_path();
}

fs::path cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  return (xdg && *xdg ? fs::path(xdg) : home_dir() / ".cache") / "graft";
}

fs::path data_dir() {
  const char* xdg = std::getenv("XDG_DATA_HOME");
  return (xdg && *xdg ? fs::path(xdg) : home_dir() / ".local" / "share") / "graft";
}

TempDir::TempDir(std::string_view prefix) {
  std::string pattern = (fs::temp_directory_path() / (std::string(prefix) + ".XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("cannot create a temporary folder: " + std::string(std::strerror(errno)));
  }
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

}  // namespace graft

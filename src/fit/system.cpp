#include "fit/system.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

namespace graft::fit {

namespace {

// A "Key:   123 kB" line of /proc/meminfo or /proc/self/status, in bytes; 0 when absent.
int64_t read_kib_field(const fs::path& file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) != 0 || line.size() <= key.size() || line[key.size()] != ':')
      continue;
    std::istringstream fields(line.substr(key.size() + 1));
    int64_t value = 0;
    fields >> value;
    return value * 1024;
  }
  return 0;
}

// A cgroup file holding one number (or "max"); 0 when absent or unlimited.
int64_t read_number(const fs::path& file) {
  std::ifstream in(file);
  std::string text;
  if (!(in >> text) || text == "max") return 0;
  try {
    const long double v = std::stold(text);
    // cgroup v1 writes a huge number (about 2^63) for "no limit".
    if (v <= 0 || v >= static_cast<long double>(int64_t(1) << 60)) return 0;
    return static_cast<int64_t>(v);
  } catch (const std::exception&) {
    return 0;
  }
}

// This process's cgroup (v2: the "0::/path" line of /proc/self/cgroup).
fs::path own_cgroup(const fs::path& proc) {
  std::ifstream in(proc / "self" / "cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return fs::path(line.substr(3)).relative_path();
  }
  return {};
}

}  // namespace

int64_t SystemMemory::free() const {
  if (cgroup_limit > 0) return std::min(available, std::max<int64_t>(0, cgroup_limit - cgroup_usage));
  return available;
}

std::string SystemMemory::source() const {
  return cgroup_limit > 0 && cgroup_limit - cgroup_usage < available ? "cgroup limit" : "MemAvailable";
}

SystemMemory read_system_memory(const fs::path& proc, const fs::path& cgroup) {
  SystemMemory m;
  m.total = read_kib_field(proc / "meminfo", "MemTotal");
  m.available = read_kib_field(proc / "meminfo", "MemAvailable");
  // cgroup v2: our own group, then the namespace's root; v1: the memory controller's root.
  std::vector<fs::path> dirs{cgroup};
  if (const fs::path own = own_cgroup(proc); !own.empty()) dirs.insert(dirs.begin(), cgroup / own);
  for (const fs::path& dir : dirs) {
    if (int64_t limit = read_number(dir / "memory.max"); limit > 0) {
      m.cgroup_limit = limit;
      m.cgroup_usage = read_number(dir / "memory.current");
      return m;
    }
  }
  if (int64_t limit = read_number(cgroup / "memory" / "memory.limit_in_bytes"); limit > 0) {
    m.cgroup_limit = limit;
    m.cgroup_usage = read_number(cgroup / "memory" / "memory.usage_in_bytes");
  }
  return m;
}

int64_t safety_margin(int64_t free_bytes) {
  return std::max<int64_t>(int64_t(256) << 20, free_bytes / 20);
}

int64_t process_rss() {
  return read_kib_field("/proc/self/status", "VmRSS");
}

int64_t process_peak_rss() {
  return read_kib_field("/proc/self/status", "VmHWM");
}

int64_t baseline_rss() {
  static const int64_t first = process_rss();
  return first;
}

std::string cpu_model(const fs::path& proc) {
  std::ifstream in(proc / "cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(colon + 1);
    name.erase(0, name.find_first_not_of(" \t"));
    return name;
  }
  return "unknown CPU";
}

}  // namespace graft::fit

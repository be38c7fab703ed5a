// What this machine offers: memory a new process may use (MemAvailable, or
// what a cgroup limit leaves), this process's resident memory, the CPU.
// The /proc and /sys roots are parameters so tests can fake them.
#pragma once

#include <cstdint>
#include <string>

#include "util/files.h"

namespace graft::fit {

struct SystemMemory {
  int64_t total = 0;         // MemTotal
  int64_t available = 0;     // MemAvailable
  int64_t cgroup_limit = 0;  // the memory cgroup's limit; 0: none
  int64_t cgroup_usage = 0;  // what the cgroup uses now
  // What a new process may use: MemAvailable, or less when the cgroup's
  // limit leaves less.
  int64_t free() const;
  // "MemAvailable" or "cgroup limit": which of the two free() took.
  std::string source() const;
};

SystemMemory read_system_memory(const fs::path& proc = "/proc", const fs::path& cgroup = "/sys/fs/cgroup");

// The margin kept free of everything graft plans: 5 % of what is free, at
// least 256 MiB.
int64_t safety_margin(int64_t free_bytes);

// Resident memory of this process now (VmRSS) and at its peak (VmHWM).
int64_t process_rss();
int64_t process_peak_rss();
// This process's resident memory when it was first asked for (call early:
// the CLI commands do before they load anything). The fixed overhead of a
// graft process: its code, libraries and runtime, measured.
int64_t baseline_rss();

// "AMD EPYC 7B13" etc. (the first "model name" of /proc/cpuinfo).
std::string cpu_model(const fs::path& proc = "/proc");

}  // namespace graft::fit

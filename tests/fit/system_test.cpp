// Usable memory from /proc/meminfo and cgroup limits, on fake trees.
#include <gtest/gtest.h>

#include <fstream>

#include "fit/fit.h"
#include "util/files.h"

namespace graft::fit {
namespace {

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

TEST(FitSystem, MemAvailableWithoutACgroupLimit) {
  TempDir dir;
  write(dir.path() / "proc/meminfo",
        "MemTotal:       16000000 kB\nMemFree:  1 kB\nMemAvailable:    8000000 kB\n");
  write(dir.path() / "cgroup/memory.max", "max\n");
  const SystemMemory m = read_system_memory(dir.path() / "proc", dir.path() / "cgroup");
  EXPECT_EQ(m.total, int64_t(16000000) * 1024);
  EXPECT_EQ(m.available, int64_t(8000000) * 1024);
  EXPECT_EQ(m.cgroup_limit, 0);
  EXPECT_EQ(m.free(), m.available);
  EXPECT_EQ(m.source(), "MemAvailable");
}

TEST(FitSystem, TheProcessCgroupLimitWinsWhenTighter) {
  TempDir dir;
  write(dir.path() / "proc/meminfo", "MemTotal: 16000000 kB\nMemAvailable: 8000000 kB\n");
  write(dir.path() / "proc/self/cgroup", "0::/jobs/graft\n");
  write(dir.path() / "cgroup/jobs/graft/memory.max", "2147483648\n");
  write(dir.path() / "cgroup/jobs/graft/memory.current", "536870912\n");
  const SystemMemory m = read_system_memory(dir.path() / "proc", dir.path() / "cgroup");
  EXPECT_EQ(m.cgroup_limit, int64_t(2) << 30);
  EXPECT_EQ(m.free(), (int64_t(2) << 30) - (int64_t(512) << 20));
  EXPECT_EQ(m.source(), "cgroup limit");
}

TEST(FitSystem, CgroupV1LimitsAndItsNoLimitValue) {
  TempDir dir;
  write(dir.path() / "proc/meminfo", "MemTotal: 16000000 kB\nMemAvailable: 1000000 kB\n");
  write(dir.path() / "cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(read_system_memory(dir.path() / "proc", dir.path() / "cgroup").cgroup_limit, 0);
  write(dir.path() / "cgroup/memory/memory.limit_in_bytes", "4294967296\n");
  write(dir.path() / "cgroup/memory/memory.usage_in_bytes", "1073741824\n");
  const SystemMemory m = read_system_memory(dir.path() / "proc", dir.path() / "cgroup");
  EXPECT_EQ(m.cgroup_limit, int64_t(4) << 30);
  // MemAvailable (about 1 GB) is tighter than the 3 GiB the limit leaves.
  EXPECT_EQ(m.free(), m.available);
  EXPECT_EQ(m.source(), "MemAvailable");
}

TEST(FitSystem, TheMarginIsFivePercentAndAtLeast256MiB) {
  EXPECT_EQ(safety_margin(int64_t(1) << 30), int64_t(256) << 20);
  EXPECT_EQ(safety_margin(int64_t(100) << 30), (int64_t(100) << 30) / 20);
  const Usable here = usable_here();
  EXPECT_GT(here.free, 0);
  EXPECT_EQ(here.bytes, here.free - here.margin);
}

TEST(FitSystem, ProcessMemoryAndCpu) {
  EXPECT_GT(process_rss(), 0);
  EXPECT_GE(process_peak_rss(), process_rss());
  EXPECT_GT(baseline_rss(), 0);
  TempDir dir;
  write(dir.path() / "cpuinfo", "processor\t: 0\nmodel name\t: Test CPU 9000\n");
  EXPECT_EQ(cpu_model(dir.path()), "Test CPU 9000");
}

}  // namespace
}  // namespace graft::fit

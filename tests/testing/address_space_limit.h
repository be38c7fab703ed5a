// AddressSpaceLimit: while it lives, the process may map only what it maps
// now plus `headroom`, so that larger allocations fail at once, whatever the
// system's overcommit policy. For tests of out-of-memory paths.
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <cstddef>
#include <fstream>

#include <gtest/gtest.h>

namespace graft::testing {

class AddressSpaceLimit {
 public:
  explicit AddressSpaceLimit(size_t headroom) {
    size_t pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    getrlimit(RLIMIT_AS, &old_);
    rlimit limit = old_;
    limit.rlim_cur = rlim_t(pages * size_t(sysconf(_SC_PAGESIZE)) + headroom);
    EXPECT_EQ(setrlimit(RLIMIT_AS, &limit), 0);
  }
  ~AddressSpaceLimit() { setrlimit(RLIMIT_AS, &old_); }
  AddressSpaceLimit(const AddressSpaceLimit&) = delete;
  AddressSpaceLimit& operator=(const AddressSpaceLimit&) = delete;

 private:
  rlimit old_{};
};

}  // namespace graft::testing

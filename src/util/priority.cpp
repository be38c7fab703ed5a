#include "util/priority.h"

#include <sched.h>
#include <sys/resource.h>

#include <cerrno>
#include <charconv>

namespace graft {

int lower_cpu_priority(pid_t tid, int nice) {
  if (nice == kIdlePriority) {
    sched_param param{};
    return ::sched_setscheduler(tid, SCHED_IDLE, &param) == 0 ? 0 : errno;
  }
  if (nice == 0) return 0;
  return ::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), nice) == 0 ? 0 : errno;
}

Result<int> parse_cpu_priority(std::string_view text) {
  if (text == "idle") return kIdlePriority;
  int value = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0 || value > 19) {
    return errorf("invalid_argument", "a priority is a niceness from 0 to 19 or \"idle\" (got '{}')", text);
  }
  return value;
}

}  // namespace graft

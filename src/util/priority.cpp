#include "util/priority.h"

#include <sched.h>
#include <sys/resource.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

namespace graft {

int niceness_below_process(int steps) {
  if (steps == kIdlePriority) return kIdlePriority;
  // PRIO_PROCESS with the process id reads the main thread, which graft never lowers.
  errno = 0;
  const int base = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::getpid()));
  if (base == -1 && errno != 0) return steps;
  return std::min(19, base + steps);
}

int set_cpu_priority(pid_t tid, int niceness) {
  if (niceness == kIdlePriority) {
    sched_param param{};
    return ::sched_setscheduler(tid, SCHED_IDLE, &param) == 0 ? 0 : errno;
  }
  return ::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), niceness) == 0 ? 0 : errno;
}

int lower_cpu_priority(pid_t tid, int steps) {
  if (steps == 0) return 0;
  return set_cpu_priority(tid, niceness_below_process(steps));
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

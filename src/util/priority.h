// CPU priority of threads and child processes: graft's compute threads and
// training children run below the HTTP threads (`--compute-nice`,
// `--train-nice`).
#pragma once

#include <sys/types.h>

#include <string_view>

#include "util/result.h"

namespace graft {

// Below every niceness: the thread runs only when nothing else wants a core (SCHED_IDLE).
constexpr int kIdlePriority = 20;

// Lowers a thread's priority to niceness `nice` (1-19) or to kIdlePriority.
// tid 0 is the calling thread; threads it starts later (and, in a child before
// exec, the whole program) inherit it. 0 does nothing. Returns 0 or an errno;
// async-signal-safe, so a child may call it between fork and exec.
int lower_cpu_priority(pid_t tid, int nice);

// "0".."19" or "idle" (kIdlePriority).
Result<int> parse_cpu_priority(std::string_view text);

}  // namespace graft

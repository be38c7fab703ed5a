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

// The niceness `steps` (1-19) below the process's own, capped at 19, or
// kIdlePriority for kIdlePriority. Relative, so that under `nice -n 10 graft
// serve` the compute threads stay below the HTTP threads, and under a
// negative niceness they do not drop below every other program of that run.
int niceness_below_process(int steps);

// Sets a thread's niceness, or SCHED_IDLE for kIdlePriority. tid 0 is the
// calling thread; threads it starts later (and, in a child before exec, the
// whole program) inherit it. Returns 0 or an errno; async-signal-safe, so a
// child may call it between fork and exec.
int set_cpu_priority(pid_t tid, int niceness);

// set_cpu_priority(tid, niceness_below_process(steps)); 0 does nothing.
int lower_cpu_priority(pid_t tid, int steps);

// "0".."19" or "idle" (kIdlePriority).
Result<int> parse_cpu_priority(std::string_view text);

}  // namespace graft

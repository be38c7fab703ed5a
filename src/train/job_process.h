// The child process a training job runs in: its own process group (signals
// reach it and anything it starts), a lower CPU priority, stdout and stderr
// appended to files (so nothing it says is lost if the server dies), a
// parent-death signal, and a reaper. Plus the readers of those files.
#pragma once

#include <sys/types.h>

#include <csignal>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "util/files.h"
#include "util/result.h"

namespace graft {

struct ChildOptions {
  std::vector<std::string> argv;  // argv[0]: the program's path
  fs::path stdout_path;           // appended to (created if missing)
  fs::path stderr_path;
  int priority = 0;  // niceness steps below this process (0-19) or kIdlePriority (util/priority.h)
  // Sent to the child when the thread that spawned it ends (the server died):
  // SIGTERM makes `graft train` checkpoint and stop. 0: none.
  int parent_death_signal = SIGTERM;
};

// How a child ended.
struct ExitStatus {
  int code = 0;    // the exit status when it exited
  int signal = 0;  // the signal that killed it, or 0
  bool ok() const { return signal == 0 && code == 0; }
  std::string describe() const;  // "exited with status 3", "was killed by signal 9 (Killed)"
};

class ChildProcess {
 public:
  static Result<std::unique_ptr<ChildProcess>> spawn(const ChildOptions& options);
  // A child still running is killed (its whole group) and reaped.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Sends a signal to the child's whole process group (nothing once reaped).
  void signal(int sig);
  // Reaps the child if it has ended; nullopt while it runs.
  std::optional<ExitStatus> poll();
  // Waits for the child to end and reaps it.
  ExitStatus wait();

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  std::optional<ExitStatus> status_;
};

// Whether a process with this id exists (and is not a zombie).
bool process_alive(pid_t pid);

// The complete lines of a file from byte `offset` on. `offset` moves past the
// last newline read; a line still being written stays for the next call.
std::vector<std::string> read_new_lines(const fs::path& path, int64_t& offset);

// The last `max_bytes` of a file from byte `from` on, cut at a line start.
std::string read_tail(const fs::path& path, int64_t from, size_t max_bytes);

// The file's size (0 when missing); a file that does not end in a newline
// gets one first, so a line cut by a killed writer never joins the next one.
int64_t end_lines(const fs::path& path);

}  // namespace graft

#include "train/job_process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "util/priority.h"

namespace graft {

namespace {

// What the child reports on its error pipe before exec fails.
struct SpawnFailure {
  int step;  // which of the set-up steps below failed
  int error;
};

const char* kSteps[] = {"create its process group", "lower its priority", "redirect its output", "start it"};

[[noreturn]] void child_fail(int pipe_fd, int step) {
  SpawnFailure f{step, errno};
  ssize_t ignored = ::write(pipe_fd, &f, sizeof f);
  (void)ignored;
  ::_exit(127);
}

// Between fork and exec: async-signal-safe calls only.
[[noreturn]] void run_child(char* const* argv, int in_fd, int out_fd, int err_fd, int pipe_fd, int niceness,
                            int death_signal, pid_t parent) {
  if (::setpgid(0, 0) != 0) child_fail(pipe_fd, 0);
  if (death_signal != 0) {
    ::prctl(PR_SET_PDEATHSIG, death_signal);
    if (::getppid() != parent) ::_exit(1);  // the parent is already gone
  }
  if (niceness >= 0 && set_cpu_priority(0, niceness) != 0) child_fail(pipe_fd, 1);
  if (::dup2(in_fd, 0) < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0) child_fail(pipe_fd, 2);
  // Nothing else of the server's (sockets, the database) goes to the child.
  if (pipe_fd > 3) ::close_range(3, static_cast<unsigned>(pipe_fd - 1), 0);
  ::close_range(static_cast<unsigned>(pipe_fd + 1), ~0U, 0);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP}) ::signal(sig, SIG_DFL);
  ::execv(argv[0], argv);
  child_fail(pipe_fd, 3);
}

int open_append(const fs::path& path) {
  return ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
}

ExitStatus decode(int status) {
  ExitStatus s;
  if (WIFEXITED(status)) s.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) s.signal = WTERMSIG(status);
  return s;
}

}  // namespace

std::string ExitStatus::describe() const {
  if (signal != 0) return fmt::format("was killed by signal {} ({})", signal, ::strsignal(signal));
  return fmt::format("exited with status {}", code);
}

Result<std::unique_ptr<ChildProcess>> ChildProcess::spawn(const ChildOptions& options) {
  if (options.argv.empty()) return make_error("invalid_argument", "no program to run");
  std::vector<char*> argv;
  for (const std::string& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  int in_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  int out_fd = open_append(options.stdout_path);
  int err_fd = open_append(options.stderr_path);
  int pipe_fds[2] = {-1, -1};
  const bool opened = in_fd >= 0 && out_fd >= 0 && err_fd >= 0 && ::pipe2(pipe_fds, O_CLOEXEC) == 0;
  const int open_error = errno;
  auto close_all = [&] {
    for (int fd : {in_fd, out_fd, err_fd, pipe_fds[0], pipe_fds[1]}) {
      if (fd >= 0) ::close(fd);
    }
  };
  if (!opened) {
    close_all();
    return errorf("io_error", "cannot prepare the output files of {}: {}", options.argv[0],
                  std::strerror(open_error));
  }

  const pid_t parent = ::getpid();
  // Computed here: the forking thread may already run below the process.
  const int niceness = options.priority == 0 ? -1 : niceness_below_process(options.priority);
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    close_all();
    return errorf("io_error", "cannot start {}: {}", options.argv[0], std::strerror(err));
  }
  if (pid == 0) {
    run_child(argv.data(), in_fd, out_fd, err_fd, pipe_fds[1], niceness, options.parent_death_signal, parent);
  }
  ::setpgid(pid, pid);  // also here, so that signals reach the group even before the child runs
  ::close(pipe_fds[1]);
  pipe_fds[1] = -1;
  SpawnFailure failure{};
  ssize_t n;
  do {
    n = ::read(pipe_fds[0], &failure, sizeof failure);
  } while (n < 0 && errno == EINTR);
  close_all();
  std::unique_ptr<ChildProcess> child(new ChildProcess(pid));
  if (n == static_cast<ssize_t>(sizeof failure)) {
    child->wait();
    return errorf("io_error", "cannot {} {}: {}", kSteps[failure.step], options.argv[0],
                  std::strerror(failure.error));
  }
  return child;
}

ChildProcess::~ChildProcess() {
  if (status_) return;
  signal(SIGKILL);
  wait();
}

void ChildProcess::signal(int sig) {
  if (status_) return;
  ::kill(-pid_, sig);
}

std::optional<ExitStatus> ChildProcess::poll() {
  if (status_) return status_;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) status_ = decode(status);
  return status_;
}

ExitStatus ChildProcess::wait() {
  if (status_) return *status_;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, 0);
  } while (r < 0 && errno == EINTR);
  status_ = r == pid_ ? decode(status) : ExitStatus{0, SIGKILL};
  return *status_;
}

bool process_alive(pid_t pid) {
  if (pid <= 0) return false;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  if (!stat) return false;
  std::string line;
  std::getline(stat, line);
  // "pid (comm) S ...": the state follows the last ')'.
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state != 'Z' && state != 'X';
}

std::vector<std::string> read_new_lines(const fs::path& path, int64_t& offset) {
  std::vector<std::string> lines;
  std::ifstream in(path, std::ios::binary);
  if (!in) return lines;
  in.seekg(offset);
  std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t start = 0;
  for (size_t nl = chunk.find('\n'); nl != std::string::npos; nl = chunk.find('\n', start)) {
    lines.push_back(chunk.substr(start, nl - start));
    start = nl + 1;
  }
  offset += static_cast<int64_t>(start);
  return lines;
}

std::string read_tail(const fs::path& path, int64_t from, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  const int64_t size = in.tellg();
  int64_t start = std::max<int64_t>(from, size - static_cast<int64_t>(max_bytes));
  if (start >= size) return {};
  // From one byte earlier, to see whether `start` begins a line.
  const bool cut = start > from;
  in.seekg(cut ? start - 1 : start);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (cut) {
    const size_t nl = text.find('\n');
    text = nl == std::string::npos ? std::string() : text.substr(nl + 1);
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  return text;
}

int64_t end_lines(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || st.st_size == 0) return 0;
  int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
  if (fd < 0) return st.st_size;
  char last = '\n';
  if (::pread(fd, &last, 1, st.st_size - 1) == 1 && last != '\n') {
    if (::write(fd, "\n", 1) == 1) ++st.st_size;
  }
  ::close(fd);
  return st.st_size;
}

}  // namespace graft

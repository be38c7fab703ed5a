// Test helper: runs the graft binary as a child process, reading its stdout
// line by line (JSON events), so a test can act on an event (kill the run
// after a checkpoint) and collect the rest.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace graft::testing {

struct RunResult {
  int status = -1;                     // exit status, or 128 + signal
  std::vector<nlohmann::json> events;  // stdout, one JSON object per line
  std::vector<std::string> bad_lines;  // stdout lines that are not JSON objects
  std::string stderr_text;
};

// Runs `graft <args>` with XDG_DATA_HOME=xdg and the variables in `env`
// ("NAME=value"). on_event, when given, sees each event as it arrives and
// returns a signal to send (0: none).
inline RunResult run_graft(const std::vector<std::string>& args, const std::string& xdg,
                           const std::function<int(const nlohmann::json&)>& on_event = {},
                           const std::vector<std::string>& env = {}) {
  int out_pipe[2], err_pipe[2];
  RunResult result;
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) return result;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    close(out_pipe[0]);
    close(err_pipe[0]);
    setenv("XDG_DATA_HOME", xdg.c_str(), 1);
    for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> argv{const_cast<char*>(GRAFT_BINARY)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(GRAFT_BINARY, argv.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  FILE* out = fdopen(out_pipe[0], "r");
  char* line = nullptr;
  size_t cap = 0;
  bool signalled = false;
  while (getline(&line, &cap, out) > 0) {
    std::string text(line);
    while (!text.empty() && text.back() == '\n') text.pop_back();
    try {
      nlohmann::json e = nlohmann::json::parse(text);
      if (!e.is_object()) throw std::runtime_error("not an object");
      result.events.push_back(e);
      if (on_event && !signalled) {
        if (int sig = on_event(e); sig != 0) {
          kill(pid, sig);
          signalled = true;
        }
      }
    } catch (const std::exception&) {
      result.bad_lines.push_back(text);
    }
  }
  free(line);
  fclose(out);
  char buffer[4096];
  ssize_t n;
  while ((n = read(err_pipe[0], buffer, sizeof(buffer))) > 0) result.stderr_text.append(buffer, size_t(n));
  close(err_pipe[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// The events of one type.
inline std::vector<nlohmann::json> of_type(const RunResult& r, const std::string& type) {
  std::vector<nlohmann::json> out;
  for (const auto& e : r.events) {
    if (e.value("type", "") == type) out.push_back(e);
  }
  return out;
}

}  // namespace graft::testing

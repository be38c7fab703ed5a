// Training children: own process group, lower priority, output kept in
// files, killed and reaped as a group, told when their parent goes.
#include "train/job_process.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "util/priority.h"

namespace graft {
namespace {

using namespace std::chrono_literals;

ChildOptions shell(const TempDir& dir, const std::string& script) {
  ChildOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.stdout_path = dir.path() / "out.log";
  o.stderr_path = dir.path() / "err.log";
  return o;
}

// Field 19 of /proc/<pid>/stat: the niceness.
int niceness_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 19; ++i) rest >> field;
  return std::stoi(field);
}

bool wait_for(const std::function<bool()>& done, std::chrono::milliseconds limit = 10s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

TEST(ChildProcess, AppendsOutputToFilesAndReportsTheExitStatus) {
  TempDir dir("graft-child");
  for (int run = 0; run < 2; ++run) {
    auto child = ChildProcess::spawn(shell(dir, "echo out$0; echo err >&2; exit 3"));
    ASSERT_TRUE(child) << child.error().message;
    ExitStatus status = (*child)->wait();
    EXPECT_EQ(status.code, 3);
    EXPECT_EQ(status.signal, 0);
    EXPECT_EQ(status.describe(), "exited with status 3");
  }
  EXPECT_EQ(*read_file(dir.path() / "out.log"), "out/bin/sh\nout/bin/sh\n");
  EXPECT_EQ(*read_file(dir.path() / "err.log"), "err\nerr\n");
}

TEST(ChildProcess, SaysWhyAProgramCannotStart) {
  TempDir dir("graft-child");
  ChildOptions o = shell(dir, "");
  o.argv = {(dir.path() / "no-such-program").string()};
  auto child = ChildProcess::spawn(o);
  ASSERT_FALSE(child);
  EXPECT_NE(child.error().message.find("No such file"), std::string::npos) << child.error().message;
}

TEST(ChildProcess, RunsTheGivenStepsBelowThisProcessInItsOwnProcessGroup) {
  TempDir dir("graft-child");
  ChildOptions o = shell(dir, "sleep 30");
  o.priority = 13;
  const int base = niceness_of(::getpid());  // not 0 under `nice ctest`
  auto child = ChildProcess::spawn(o);
  ASSERT_TRUE(child);
  const pid_t pid = (*child)->pid();
  EXPECT_EQ(::getpgid(pid), pid);
  EXPECT_NE(::getpgid(pid), ::getpgid(0));
  EXPECT_EQ(niceness_of(pid), std::min(19, base + 13));
  (*child)->signal(SIGKILL);
  EXPECT_EQ((*child)->wait().signal, SIGKILL);
}

TEST(ChildProcess, AThreadAlreadyLoweredStartsItAtTheSameNiceness) {
  // The job runner's thread runs below the process itself; its children must
  // not be lowered twice.
  TempDir dir("graft-child");
  ChildOptions o = shell(dir, "sleep 30");
  o.priority = 6;
  const int base = niceness_of(::getpid());
  pid_t pid = 0;
  std::thread([&] {
    ASSERT_EQ(lower_cpu_priority(0, 3), 0);
    auto child = ChildProcess::spawn(o);
    ASSERT_TRUE(child);
    pid = (*child)->pid();
    EXPECT_EQ(niceness_of(pid), std::min(19, base + 6));
    (*child)->signal(SIGKILL);
    (*child)->wait();
  }).join();
  EXPECT_NE(pid, 0);
}

TEST(ChildProcess, IdlePriorityUsesSchedIdle) {
  TempDir dir("graft-child");
  ChildOptions o = shell(dir, "sleep 30");
  o.priority = kIdlePriority;
  auto child = ChildProcess::spawn(o);
  ASSERT_TRUE(child);
  EXPECT_EQ(::sched_getscheduler((*child)->pid()), SCHED_IDLE);
}

TEST(ChildProcess, ASignalReachesTheWholeGroupAndTheChildIsReaped) {
  TempDir dir("graft-child");
  // The shell starts a grandchild and reports its pid.
  auto child = ChildProcess::spawn(shell(dir, "sleep 30 & echo $!; wait"));
  ASSERT_TRUE(child);
  int64_t offset = 0;
  std::vector<std::string> lines;
  ASSERT_TRUE(wait_for([&] {
    lines = read_new_lines(dir.path() / "out.log", offset);
    return !lines.empty();
  }));
  const pid_t grandchild = std::stoi(lines[0]);
  ASSERT_TRUE(process_alive(grandchild));
  EXPECT_FALSE((*child)->poll());
  (*child)->signal(SIGTERM);
  EXPECT_EQ((*child)->wait().signal, SIGTERM);
  EXPECT_TRUE(wait_for([&] { return !process_alive(grandchild); }));
  EXPECT_FALSE(process_alive((*child)->pid()));  // reaped: no zombie left
}

TEST(ChildProcess, GetsItsParentDeathSignalWhenTheSpawningThreadEnds) {
  TempDir dir("graft-child");
  std::unique_ptr<ChildProcess> child;
  std::thread spawner([&] {
    ChildOptions o = shell(dir, "trap 'echo stopped; exit 0' TERM; while :; do sleep 0.05; done");
    auto spawned = ChildProcess::spawn(o);
    ASSERT_TRUE(spawned);
    child = std::move(*spawned);
    // Let the shell install its trap before the thread ends.
    std::this_thread::sleep_for(300ms);
  });
  spawner.join();
  ASSERT_TRUE(child);
  ExitStatus status = child->wait();
  EXPECT_TRUE(status.ok()) << status.describe();
  EXPECT_EQ(*read_file(dir.path() / "out.log"), "stopped\n");
}

TEST(ChildProcess, DestroyingARunningChildKillsAndReapsIt) {
  TempDir dir("graft-child");
  pid_t pid = 0;
  {
    auto child = ChildProcess::spawn(shell(dir, "sleep 30"));
    ASSERT_TRUE(child);
    pid = (*child)->pid();
  }
  EXPECT_FALSE(process_alive(pid));
}

TEST(LogFiles, CompleteLinesOnlyAndACutLineNeverJoinsTheNext) {
  TempDir dir("graft-child");
  const fs::path log = dir.path() / "events.jsonl";
  {
    std::ofstream out(log);
    out << "one\ntwo\npartial";
  }
  int64_t offset = 0;
  EXPECT_EQ(read_new_lines(log, offset), (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(offset, 8);
  EXPECT_TRUE(read_new_lines(log, offset).empty());
  // A killed writer left "partial"; the next writer's first line stays whole.
  EXPECT_EQ(end_lines(log), 16);
  {
    std::ofstream out(log, std::ios::app);
    out << "three\n";
  }
  EXPECT_EQ(read_new_lines(log, offset), (std::vector<std::string>{"partial", "three"}));
  EXPECT_EQ(end_lines(dir.path() / "missing"), 0);
}

TEST(LogFiles, TailIsTheEndOfOneRunCutAtALine) {
  TempDir dir("graft-child");
  const fs::path log = dir.path() / "err.log";
  {
    std::ofstream out(log);
    out << "old run\n";
    for (int i = 0; i < 100; ++i) out << "line " << i << "\n";
  }
  EXPECT_EQ(read_tail(log, 0, 20), "line 98\nline 99");
  EXPECT_EQ(read_tail(log, 8, 8), "line 99");
  EXPECT_EQ(read_tail(log, 8, 7), "");  // only part of a line fits
  EXPECT_EQ(read_tail(log, 8, 1 << 20).substr(0, 6), "line 0");
  EXPECT_EQ(read_tail(log, 1 << 20, 100), "");
}

}  // namespace
}  // namespace graft

// JobRunner: runs the job store's training jobs, each as a `graft train
// --json` child process, so a crash in training cannot take the server down.
//
// - Jobs start in queue order, at most `max_running` at once.
// - A child's stdout (its events) and stderr go to files in the job's folder;
//   the runner records each event in the store as it appears. If the server
//   dies, the next runner reads what is left of them first.
// - A child that ends without saying why (killed, crashed) is retried from
//   its last checkpoint up to `max_retries` times; then the job fails with
//   the child's last words. A child that reports an error fails the job.
// - Cancel and pause stop the child with SIGTERM (it checkpoints first), then
//   SIGKILL after a grace period. Checkpoints are kept.
// - On start, jobs left running by a server that died, or paused by one that
//   shut down, are queued again and resume from their last checkpoint.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "train/dataset.h"
#include "train/job_store.h"

namespace graft {

struct RunnerOptions {
  std::vector<std::string> trainer;  // the command before its arguments: {"/path/to/graft", "train"}
  fs::path jobs_dir;                 // one folder per job
  fs::path store_dir;                // the adapter store finished adapters land in
  int max_running = 1;               // jobs trained at once
  int priority = 19;                 // the children's niceness, or kIdlePriority
  int threads = 0;                   // the trainer's --threads (0: its default)
  int max_retries = 2;               // crashes of one job's trainer that are retried
  std::chrono::milliseconds poll_interval{50};
  std::chrono::milliseconds stop_grace{30000};  // SIGTERM, then SIGKILL after this
  // Checks a data file before its job queues (every line's shape, as the
  // trainer reads it): an error names the line in *where. Null: only the
  // trainer checks. Runs on the runner's thread, at the trainers' priority.
  std::function<Status(const fs::path& file, DataLocation* where)> check_data;
  // Called (on a runner thread) after a job succeeded.
  std::function<void(const JobRecord&)> on_succeeded;
};

class JobRunner {
 public:
  // Recovers the jobs a previous server left behind, then starts working.
  static Result<std::unique_ptr<JobRunner>> start(JobStore& store, RunnerOptions options);
  // shutdown(), then joins.
  ~JobRunner();
  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;

  // Records a new job (validating_files) and queues it once its files check out.
  // An empty adapter_id becomes "ft-" and part of the job id.
  Result<JobRecord> create(JobSpec spec, std::string adapter_id);
  // "conflict" when the job's status does not allow it.
  Result<JobRecord> cancel(const std::string& id);
  Result<JobRecord> pause(const std::string& id);
  Result<JobRecord> resume(const std::string& id);

  // Stops every running child (they checkpoint) and marks their jobs paused
  // by the shutdown, so that the next start resumes them.
  void shutdown();

  const RunnerOptions& options() const { return options_; }

 private:
  enum class StopRequest { none, cancel, pause, shutdown };
  struct Live;

  JobRunner(JobStore& store, RunnerOptions options) : store_(store), options_(std::move(options)) {}
  void recover();
  void control_loop();
  void validate(const JobRecord& job);
  void start_queued(std::unique_lock<std::mutex>& lock);
  void run_job(std::shared_ptr<Live> live);
  Result<JobRecord> request_stop(const std::string& id, StopRequest request);
  fs::path events_log(const JobRecord& job) const { return job.work_dir / "trainer-events.jsonl"; }
  fs::path stderr_log(const JobRecord& job) const { return job.work_dir / "trainer-stderr.log"; }
  fs::path trainer_dir(const JobRecord& job) const { return job.work_dir / "train"; }

  JobStore& store_;
  RunnerOptions options_;

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool dirty_ = true;  // something to look at: new jobs, a finished child, a resume
  std::map<std::string, std::shared_ptr<Live>> live_;  // jobs whose child is starting or running
  std::vector<std::thread> finished_threads_;          // workers to join
  std::thread control_;
};

}  // namespace graft

#include "train/job_runner.h"

#include <signal.h>

#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "train/job_events.h"
#include "train/job_process.h"
#include "train/publish.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/priority.h"

namespace graft {

namespace {

using Clock = std::chrono::steady_clock;

const char* state_phrase(JobStatus status) {
  switch (status) {
    case JobStatus::validating_files:
      return "is validating its files";
    case JobStatus::queued:
      return "is queued";
    case JobStatus::running:
      return "is running";
    case JobStatus::paused:
      return "is paused";
    case JobStatus::succeeded:
      return "has succeeded";
    case JobStatus::failed:
      return "has failed";
    case JobStatus::cancelled:
      return "was cancelled";
  }
  return "";
}

Status conflict(const JobRecord& job, std::string_view action) {
  return errorf("conflict", "job {} {}: it cannot be {}", job.id, state_phrase(job.status), action);
}

// Whether a live process is this job's trainer (and not a stranger that got its pid).
bool is_trainer_of(pid_t pid, const JobRecord& job) {
  std::ifstream in(fmt::format("/proc/{}/cmdline", pid), std::ios::binary);
  std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return cmdline.find(job.work_dir.string()) != std::string::npos;
}

// Stops a trainer left by a server that died (its parent-death signal should
// have done so already): SIGTERM, then SIGKILL after the grace period.
void stop_stray(pid_t pid, std::chrono::milliseconds grace) {
  ::kill(-pid, SIGTERM);
  const auto deadline = Clock::now() + grace;
  while (process_alive(pid) && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (process_alive(pid)) ::kill(-pid, SIGKILL);
  for (int i = 0; i < 100 && process_alive(pid); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

Status check_file(JobStore& store, const std::string& id, const fs::path& path, const char* param) {
  auto record = store.file(id);
  if (!record) return errorf("invalid_file", "{}: {}", param, record.error().message);
  auto content = read_file(path);
  if (!content) return errorf("invalid_file", "{} {} cannot be read: {}", param, id, content.error().message);
  if (sha256_hex(*content) != record->sha256) {
    return errorf("invalid_file", "{} {} changed on disk since it was uploaded", param, id);
  }
  return {};
}

}  // namespace

struct JobRunner::Live {
  std::string job_id;
  std::thread thread;
  std::mutex mutex;  // guards what follows
  std::unique_ptr<ChildProcess> child;
  StopRequest request = StopRequest::none;
  Clock::time_point kill_at;

  void stop(StopRequest why, std::chrono::milliseconds grace) {
    std::lock_guard lock(mutex);
    if (request == StopRequest::none || why == StopRequest::cancel) request = why;
    kill_at = Clock::now() + grace;
    if (child) child->signal(SIGTERM);
  }
};

Result<std::unique_ptr<JobRunner>> JobRunner::start(JobStore& store, RunnerOptions options) {
  if (options.trainer.empty()) return make_error("invalid_argument", "no trainer command");
  std::error_code ec;
  fs::create_directories(options.jobs_dir, ec);
  if (ec) return errorf("io_error", "cannot create {}: {}", options.jobs_dir.string(), ec.message());
  std::unique_ptr<JobRunner> runner(new JobRunner(store, std::move(options)));
  runner->recover();
  runner->control_ = std::thread([r = runner.get()] { r->control_loop(); });
  return runner;
}

JobRunner::~JobRunner() {
  shutdown();
}

// Reads what a job's trainer wrote since the last look and records it.
static Status ingest(JobStore& store, const std::string& id, const fs::path& log, int64_t& offset,
                     TrainerOutcome& outcome) {
  int64_t next = offset;
  std::vector<std::string> lines = read_new_lines(log, next);
  if (lines.empty()) return {};
  auto updated = store.update_job(id, [&](JobRecord& job, JobChanges& changes) -> Status {
    for (const std::string& line : lines) apply_trainer_line(line, job, changes, outcome);
    job.events_offset = next;
    return {};
  });
  if (!updated) return updated.error();
  offset = next;
  return {};
}

void JobRunner::recover() {
  for (const JobRecord& job : store_.jobs_with_status(JobStatus::running)) {
    const auto pid = static_cast<pid_t>(job.pid);
    if (pid > 0 && process_alive(pid) && is_trainer_of(pid, job)) {
      GRAFT_LOG_WARN("job {}: stopping trainer {} left by the previous server", job.id, pid);
      stop_stray(pid, options_.stop_grace);
    }
    int64_t offset = job.events_offset;
    end_lines(events_log(job));
    TrainerOutcome outcome;
    if (Status s = ingest(store_, job.id, events_log(job), offset, outcome); !s) {
      GRAFT_LOG_ERROR("job {}: {}", job.id, s.error().message);
    }
    auto requeued = store_.update_job(job.id, [&](JobRecord& j, JobChanges& changes) -> Status {
      j.pid = 0;
      if (j.status != JobStatus::running) return {};  // it ended before the server did
      j.status = JobStatus::queued;
      changes.events.push_back(message_event(
          j.checkpoint_step > 0
              ? fmt::format("The server stopped while the job ran; it resumes from step {}",
                            j.checkpoint_step)
              : std::string(
                    "The server stopped while the job ran, before its first checkpoint; it starts over")));
      return {};
    });
    if (!requeued) GRAFT_LOG_ERROR("job {}: {}", job.id, requeued.error().message);
  }
  for (const JobRecord& job : store_.jobs_with_status(JobStatus::paused)) {
    if (job.pause_reason != PauseReason::shutdown) continue;
    auto requeued = store_.update_job(job.id, [&](JobRecord& j, JobChanges& changes) -> Status {
      if (j.status != JobStatus::paused || j.pause_reason != PauseReason::shutdown) return {};
      j.status = JobStatus::queued;
      j.pause_reason = PauseReason::none;
      changes.events.push_back(message_event(
          fmt::format("The server started again; the job resumes from step {}", j.checkpoint_step)));
      return {};
    });
    if (!requeued) GRAFT_LOG_ERROR("job {}: {}", job.id, requeued.error().message);
  }
}

Result<JobRecord> JobRunner::create(JobSpec spec, std::string adapter_id) {
  JobRecord job;
  job.id = new_id("ftjob-");
  job.created_at = unix_now();
  job.spec = std::move(spec);
  job.status = JobStatus::validating_files;
  job.adapter_id =
      adapter_id.empty() ? "ft-" + job.id.substr(job.id.find('-') + 1, 12) : std::move(adapter_id);
  job.work_dir = options_.jobs_dir / job.id;
  JobChanges changes;
  changes.events.push_back(message_event("Created fine-tuning job: " + job.id));
  std::string validating = "Validating training file: " + job.spec.training_file;
  if (!job.spec.validation_file.empty()) validating += " and validation file: " + job.spec.validation_file;
  changes.events.push_back(message_event(validating));
  GRAFT_TRY(JobRecord created, store_.create_job(std::move(job), std::move(changes)));
  {
    std::lock_guard lock(mutex_);
    dirty_ = true;
  }
  wake_.notify_all();
  return created;
}

void JobRunner::validate(const JobRecord& job) {
  std::optional<JobError> error;
  auto check = [&](const std::string& id, const fs::path& path, const char* param) {
    if (error || id.empty()) return;
    if (Status same = check_file(store_, id, path, param); !same) {
      error = JobError{same.error().code, same.error().message, param};
      return;
    }
    if (!options_.check_data) return;
    DataLocation where;
    if (Status readable = options_.check_data(path, &where); !readable) {
      error = data_error(job.spec, readable.error().code, readable.error().message,
                         where.file.empty() ? path.string() : where.file, where.line);
      if (error->param.empty()) error->param = param;
    }
  };
  check(job.spec.training_file, job.spec.training_path, "training_file");
  check(job.spec.validation_file, job.spec.validation_path, "validation_file");
  auto updated = store_.update_job(job.id, [&](JobRecord& j, JobChanges& changes) -> Status {
    if (j.status != JobStatus::validating_files) return {};
    if (!error) {
      j.status = JobStatus::queued;
      changes.events.push_back(message_event("Files validated, moving job to queued state"));
    } else {
      j.status = JobStatus::failed;
      j.finished_at = unix_now();
      j.error = error;
      changes.events.push_back(message_event("Job failed: " + error->message, "error"));
    }
    return {};
  });
  if (!updated) GRAFT_LOG_ERROR("job {}: {}", job.id, updated.error().message);
}

void JobRunner::control_loop() {
  // Checking data takes CPU: at the trainers' priority, below serving.
  if (int err = lower_cpu_priority(0, options_.priority); err != 0) {
    GRAFT_LOG_WARN("cannot lower the job runner's priority: {}", std::strerror(err));
  }
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait_for(lock, std::chrono::seconds(5), [&] { return stopping_ || dirty_; });
    if (stopping_) break;
    dirty_ = false;
    for (std::thread& t : finished_threads_) t.join();
    finished_threads_.clear();
    lock.unlock();
    for (const JobRecord& job : store_.jobs_with_status(JobStatus::validating_files)) validate(job);
    lock.lock();
    if (!stopping_) start_queued(lock);
  }
}

void JobRunner::start_queued(std::unique_lock<std::mutex>&) {
  if (static_cast<int>(live_.size()) >= options_.max_running) return;
  for (const JobRecord& job : store_.jobs_with_status(JobStatus::queued)) {
    if (static_cast<int>(live_.size()) >= options_.max_running) break;
    if (live_.count(job.id)) continue;  // its previous child is still stopping
    auto live = std::make_shared<Live>();
    live->job_id = job.id;
    live_[job.id] = live;
    live->thread = std::thread([this, live] { run_job(live); });
  }
}

void JobRunner::run_job(std::shared_ptr<Live> live) {
  const std::string& id = live->job_id;
  auto claimed = store_.update_job(id, [&](JobRecord& job, JobChanges& changes) -> Status {
    if (job.status != JobStatus::queued) return errorf("conflict", "no longer queued");
    job.status = JobStatus::running;
    if (!job.started_at) {
      job.started_at = unix_now();
      changes.events.push_back(message_event("Fine-tuning job started"));
    }
    return {};
  });

  std::optional<ExitStatus> exit;
  TrainerOutcome outcome;
  int64_t stderr_from = 0;
  bool spawned = false;
  std::optional<JobRecord> job;
  if (claimed) job = *claimed;
  {
    std::lock_guard lock(live->mutex);
    if (live->request != StopRequest::none) job.reset();  // stopped before it started
  }
  if (job) {
    std::error_code ec;
    fs::create_directories(job->work_dir, ec);
    const bool resume = job->checkpoint_step > 0;
    if (!resume) fs::remove_all(trainer_dir(*job), ec);
    std::vector<std::string> argv = options_.trainer;
    std::vector<std::string> args =
        resume ? resume_arguments(trainer_dir(*job))
               : fresh_run_arguments(job->spec, job->adapter_id, options_.store_dir, trainer_dir(*job));
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--json");
    if (options_.threads > 0) {
      argv.push_back("--threads");
      argv.push_back(std::to_string(options_.threads));
    }
    int64_t offset = job->events_offset;
    end_lines(events_log(*job));
    if (Status s = ingest(store_, id, events_log(*job), offset, outcome); !s) {
      GRAFT_LOG_ERROR("job {}: {}", id, s.error().message);
    }
    stderr_from = end_lines(stderr_log(*job));
    GRAFT_LOG_INFO("job {}: {}", id, fmt::join(argv, " "));
    auto child = ChildProcess::spawn({argv, events_log(*job), stderr_log(*job), options_.priority, SIGTERM});
    if (!child) {
      auto failed = store_.update_job(id, [&](JobRecord& j, JobChanges& changes) -> Status {
        j.status = JobStatus::failed;
        j.finished_at = unix_now();
        j.error = JobError{"trainer_failed", child.error().message, ""};
        changes.events.push_back(message_event("Job failed: " + child.error().message, "error"));
        return {};
      });
      if (!failed) GRAFT_LOG_ERROR("job {}: {}", id, failed.error().message);
    } else {
      spawned = true;
      const auto pid = (*child)->pid();
      {
        std::lock_guard lock(live->mutex);
        live->child = std::move(*child);
        if (live->request != StopRequest::none) live->child->signal(SIGTERM);
      }
      auto recorded = store_.update_job(id, [&](JobRecord& j, JobChanges&) -> Status {
        j.pid = pid;
        return {};
      });
      if (!recorded) GRAFT_LOG_ERROR("job {}: {}", id, recorded.error().message);
      for (;;) {
        if (Status s = ingest(store_, id, events_log(*job), offset, outcome); !s) {
          GRAFT_LOG_ERROR("job {}: {}", id, s.error().message);
        }
        {
          std::lock_guard lock(live->mutex);
          exit = live->child->poll();
          if (!exit && live->request != StopRequest::none && Clock::now() >= live->kill_at) {
            GRAFT_LOG_WARN("job {}: the trainer did not stop in time; killing it", id);
            live->child->signal(SIGKILL);
            live->kill_at = Clock::now() + options_.stop_grace;
          }
        }
        if (exit) break;
        std::this_thread::sleep_for(options_.poll_interval);
      }
      if (Status s = ingest(store_, id, events_log(*job), offset, outcome); !s) {
        GRAFT_LOG_ERROR("job {}: {}", id, s.error().message);
      }
      GRAFT_LOG_INFO("job {}: graft train {}", id, exit->describe());
    }
  }

  StopRequest request;
  {
    std::lock_guard lock(live->mutex);
    request = live->request;
  }
  if (claimed && (spawned || request != StopRequest::none)) {
    const std::string last_words = job ? read_tail(stderr_log(*job), stderr_from, 1500) : std::string();
    // A trainer that died while it wrote the adapter leaves a hidden folder
    // in the store: cleared before the job's new state shows, so that no one
    // who sees the job failed or cancelled finds it there.
    if (job && exit && !outcome.done) clear_dead_publishes(options_.store_dir, job->adapter_id);
    auto finished = store_.update_job(id, [&](JobRecord& j, JobChanges& changes) -> Status {
      j.pid = 0;
      if (outcome.done || outcome.failed || (is_final(j.status) && j.status != JobStatus::cancelled))
        return {};
      const std::string at = outcome.stopped_at ? fmt::format(" at step {}", *outcome.stopped_at) : "";
      if (j.status == JobStatus::cancelled) {
        changes.events.push_back(message_event("The trainer stopped" + at + "; its checkpoints are kept"));
      } else if (request == StopRequest::shutdown && j.status == JobStatus::running) {
        j.status = JobStatus::paused;
        j.pause_reason = PauseReason::shutdown;
        changes.events.push_back(message_event(
            "Paused" + at + ": the server is shutting down; the job resumes when it starts again"));
      } else if (j.status == JobStatus::paused) {
        changes.events.push_back(message_event("Job paused" + at));
      } else if (request != StopRequest::none && j.status == JobStatus::queued) {
        changes.events.push_back(message_event("The trainer stopped" + at + "; the job continues"));
      } else {
        // The trainer ended without finishing, failing or being asked to stop: a crash.
        j.failures += 1;
        const ExitStatus ended = exit.value_or(ExitStatus{});
        const std::string what = fmt::format("graft train {} after step {}", ended.describe(), j.last_step);
        const json data = {{"exit_code", ended.code}, {"signal", ended.signal}, {"stderr", last_words}};
        if (j.failures <= options_.max_retries) {
          j.status = JobStatus::queued;
          changes.events.push_back(message_event(
              fmt::format("{}; retrying from {} (retry {} of {})", what,
                          j.checkpoint_step > 0 ? fmt::format("step {}", j.checkpoint_step) : "the start",
                          j.failures, options_.max_retries),
              "warn", data));
        } else {
          std::string message = fmt::format("{} (tried {} times)", what, j.failures);
          if (!last_words.empty()) message += "; its last output: " + last_words;
          j.status = JobStatus::failed;
          j.finished_at = unix_now();
          j.estimated_finish.reset();
          j.error = JobError{"trainer_failed", message, ""};
          changes.events.push_back(message_event("Job failed: " + message, "error", data));
        }
      }
      return {};
    });
    if (!finished) GRAFT_LOG_ERROR("job {}: {}", id, finished.error().message);
    if (finished && finished->status == JobStatus::succeeded && options_.on_succeeded) {
      options_.on_succeeded(*finished);
    }
  }

  std::lock_guard lock(mutex_);
  live_.erase(id);
  finished_threads_.push_back(std::move(live->thread));
  dirty_ = true;
  wake_.notify_all();
}

Result<JobRecord> JobRunner::request_stop(const std::string& id, StopRequest request) {
  std::lock_guard lock(mutex_);
  std::shared_ptr<Live> live;
  if (auto it = live_.find(id); it != live_.end()) live = it->second;
  auto updated = store_.update_job(id, [&](JobRecord& job, JobChanges& changes) -> Status {
    if (request == StopRequest::cancel) {
      if (is_final(job.status)) return conflict(job, "cancelled");
      job.status = JobStatus::cancelled;
      job.finished_at = unix_now();
      job.estimated_finish.reset();
      job.pause_reason = PauseReason::none;
      changes.events.push_back(message_event("Job cancelled"));
    } else {
      if (job.status != JobStatus::queued && job.status != JobStatus::running) return conflict(job, "paused");
      job.status = JobStatus::paused;
      job.pause_reason = PauseReason::user;
      job.estimated_finish.reset();
      changes.events.push_back(
          message_event(live ? "Pausing: the trainer saves a checkpoint and stops" : "Job paused"));
    }
    return {};
  });
  if (updated && live) live->stop(request, options_.stop_grace);
  return updated;
}

Result<JobRecord> JobRunner::cancel(const std::string& id) {
  return request_stop(id, StopRequest::cancel);
}

Result<JobRecord> JobRunner::pause(const std::string& id) {
  return request_stop(id, StopRequest::pause);
}

Result<JobRecord> JobRunner::resume(const std::string& id) {
  auto updated = store_.update_job(id, [&](JobRecord& job, JobChanges& changes) -> Status {
    if (job.status != JobStatus::paused) return conflict(job, "resumed");
    job.status = JobStatus::queued;
    job.pause_reason = PauseReason::none;
    changes.to_back_of_queue = true;
    changes.events.push_back(
        message_event(job.checkpoint_step > 0
                          ? fmt::format("Job resumed: queued to continue from step {}", job.checkpoint_step)
                          : std::string("Job resumed: queued to start")));
    return {};
  });
  if (updated) {
    std::lock_guard lock(mutex_);
    dirty_ = true;
    wake_.notify_all();
  }
  return updated;
}

void JobRunner::shutdown() {
  {
    std::unique_lock lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& [id, live] : live_) live->stop(StopRequest::shutdown, options_.stop_grace);
  }
  wake_.notify_all();
  if (control_.joinable()) control_.join();
  std::unique_lock lock(mutex_);
  wake_.wait(lock, [&] { return live_.empty(); });
  for (std::thread& t : finished_threads_) t.join();
  finished_threads_.clear();
}

}  // namespace graft

// The job runner, driven with a scripted stand-in for `graft train --json`
// (fake_trainer.sh prints the contract's events): success, errors, crashes
// and retries, cancel, pause/resume, shutdown and a server that died.
#include "train/job_runner.h"

#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "train/job_files.h"
#include "train/job_process.h"

namespace graft {
namespace {

using namespace std::chrono_literals;

class JobRunnerTest : public ::testing::Test {
 protected:
  JobRunnerTest() : dir_("graft-runner") {
    store_ = JobStore::open(dir_.path() / "jobs.sqlite").value();
    files_ = std::make_unique<FileStore>(*store_, dir_.path() / "files");
  }

  RunnerOptions options(const std::string& mode, int steps = 6, const std::string& delay = "0.02") {
    RunnerOptions o;
    o.trainer = {"/usr/bin/env", "FAKE_STEPS=" + std::to_string(steps),           "FAKE_DELAY=" + delay,
                 "/bin/sh",      GRAFT_SOURCE_DIR "/tests/train/fake_trainer.sh", mode};
    o.jobs_dir = dir_.path() / "jobs";
    o.store_dir = dir_.path() / "adapters";
    o.poll_interval = 10ms;
    o.stop_grace = 5s;
    o.on_succeeded = [this](const JobRecord& job) {
      std::lock_guard lock(mutex_);
      succeeded_.push_back(job.id);
    };
    return o;
  }

  JobSpec spec() {
    auto file = files_->add("train.jsonl", "fine-tune", "{\"text\": \"a\"}\n{\"text\": \"b\"}\n");
    EXPECT_TRUE(file);
    JobSpec s;
    s.model = "tiny";
    s.model_path = "/models/tiny.gguf";
    s.training_file = file->id;
    s.training_path = file->path;
    s.seed = 7;
    return s;
  }

  JobRecord wait_until(const std::string& id, const std::function<bool(const JobRecord&)>& done,
                       std::chrono::seconds limit = 30s) {
    const auto until = std::chrono::steady_clock::now() + limit;
    for (;;) {
      JobRecord job = *store_->job(id);
      if (done(job)) return job;
      if (std::chrono::steady_clock::now() > until) {
        ADD_FAILURE() << "job " << id << " stuck in " << status_name(job.status) << " at step "
                      << job.last_step;
        return job;
      }
      std::this_thread::sleep_for(10ms);
    }
  }
  JobRecord wait_status(const std::string& id, JobStatus status) {
    return wait_until(id, [&](const JobRecord& j) { return j.status == status && j.pid == 0; });
  }

  std::vector<JobEvent> events(const std::string& id) { return store_->events_since(id, 0, 100000)->events; }
  std::vector<int64_t> train_steps(const std::string& id) {
    std::vector<int64_t> steps;
    for (const JobEvent& e : events(id)) {
      if (e.type == "metrics" && e.data.contains("train_loss"))
        steps.push_back(e.data["step"].get<int64_t>());
    }
    return steps;
  }
  bool has_message(const std::string& id, const std::string& text) {
    for (const JobEvent& e : events(id)) {
      if (e.message.find(text) != std::string::npos) return true;
    }
    return false;
  }
  static std::vector<int64_t> one_to(int64_t n) {
    std::vector<int64_t> v;
    for (int64_t i = 1; i <= n; ++i) v.push_back(i);
    return v;
  }

  TempDir dir_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<FileStore> files_;
  std::mutex mutex_;
  std::vector<std::string> succeeded_;
};

TEST_F(JobRunnerTest, ASuccessfulRunRecordsEveryStepOnceAndItsAdapter) {
  auto runner = JobRunner::start(*store_, options("ok")).value();
  auto created = runner->create(spec(), "my-adapter");
  ASSERT_TRUE(created) << created.error().message;
  EXPECT_EQ(created->status, JobStatus::validating_files);
  JobRecord job = wait_status(created->id, JobStatus::succeeded);
  EXPECT_EQ(job.fine_tuned_model, "my-adapter");
  EXPECT_EQ(job.trained_tokens, 60);
  EXPECT_EQ(job.total_steps, 6);
  EXPECT_EQ(job.train_loss, 94.5);
  EXPECT_TRUE(job.finished_at);
  EXPECT_FALSE(job.error);
  EXPECT_EQ(train_steps(job.id), one_to(6));
  EXPECT_TRUE(fs::is_directory(dir_.path() / "adapters" / "my-adapter"));
  EXPECT_EQ(job.events_offset, static_cast<int64_t>(fs::file_size(job.work_dir / "trainer-events.jsonl")));

  std::vector<std::string> messages;
  for (const JobEvent& e : events(job.id)) {
    if (e.type == "message") messages.push_back(e.message);
  }
  ASSERT_GE(messages.size(), 6u);
  EXPECT_EQ(messages[0], "Created fine-tuning job: " + job.id);
  EXPECT_EQ(messages[2], "Files validated, moving job to queued state");
  EXPECT_EQ(messages[3], "Fine-tuning job started");
  EXPECT_EQ(messages.back(), "The job has successfully completed");

  auto checkpoints = store_->list_checkpoints(job.id, std::nullopt, 10);
  ASSERT_EQ(checkpoints->items.size(), 3u);
  EXPECT_EQ(checkpoints->items[0].step, 6);
  EXPECT_EQ(checkpoints->items[2].step, 2);
  runner.reset();
  EXPECT_EQ(succeeded_, std::vector<std::string>{job.id});
}

TEST_F(JobRunnerTest, ATrainerErrorFailsTheJobAtOnceNamingTheLine) {
  auto runner = JobRunner::start(*store_, options("bad-line")).value();
  auto created = runner->create(spec(), "bad");
  JobRecord job = wait_status(created->id, JobStatus::failed);
  ASSERT_TRUE(job.error);
  EXPECT_EQ(job.error->code, "invalid_data");
  EXPECT_EQ(job.error->param, "training_file");
  EXPECT_NE(job.error->message.find("line 17"), std::string::npos) << job.error->message;
  // The user's file id, not where graft keeps the file.
  EXPECT_NE(job.error->message.find(job.spec.training_file), std::string::npos) << job.error->message;
  EXPECT_EQ(job.error->message.find(job.spec.training_path.string()), std::string::npos)
      << job.error->message;
  EXPECT_EQ(job.failures, 0);
  EXPECT_FALSE(fs::exists(dir_.path() / "adapters" / "bad"));
  EXPECT_TRUE(succeeded_.empty());
}

TEST_F(JobRunnerTest, ACrashedTrainerIsRetriedFromItsLastCheckpoint) {
  auto runner = JobRunner::start(*store_, options("crash-once")).value();
  auto created = runner->create(spec(), "retried");
  JobRecord job = wait_status(created->id, JobStatus::succeeded);
  EXPECT_EQ(job.failures, 1);
  EXPECT_EQ(train_steps(job.id), one_to(6));
  EXPECT_TRUE(has_message(job.id, "retrying from step 2 (retry 1 of 2)"));
  EXPECT_TRUE(has_message(job.id, "Resumed from step 2"));
}

TEST_F(JobRunnerTest, RepeatedCrashesFailTheJobWithTheTrainersLastWords) {
  auto runner = JobRunner::start(*store_, options("crash-always")).value();
  auto created = runner->create(spec(), "doomed");
  JobRecord job = wait_status(created->id, JobStatus::failed);
  ASSERT_TRUE(job.error);
  EXPECT_EQ(job.error->code, "trainer_failed");
  EXPECT_NE(job.error->message.find("killed by signal 9"), std::string::npos) << job.error->message;
  EXPECT_NE(job.error->message.find("out of luck at step 3"), std::string::npos) << job.error->message;
  EXPECT_NE(job.error->message.find("tried 3 times"), std::string::npos) << job.error->message;
  EXPECT_EQ(job.failures, 3);
  EXPECT_EQ(train_steps(job.id), one_to(3));
  EXPECT_FALSE(fs::exists(dir_.path() / "adapters" / "doomed"));
}

TEST_F(JobRunnerTest, CancelStopsTheTrainerAndKeepsItsCheckpoints) {
  auto runner = JobRunner::start(*store_, options("ok", 1000)).value();
  auto created = runner->create(spec(), "cancelled");
  JobRecord running = wait_until(created->id, [](const JobRecord& j) { return j.checkpoint_step >= 2; });
  const auto pid = static_cast<pid_t>(running.pid);
  ASSERT_GT(pid, 0);
  auto cancelled = runner->cancel(created->id);
  ASSERT_TRUE(cancelled);
  EXPECT_EQ(cancelled->status, JobStatus::cancelled);
  JobRecord job = wait_status(created->id, JobStatus::cancelled);
  EXPECT_FALSE(process_alive(pid));
  EXPECT_TRUE(has_message(job.id, "its checkpoints are kept"));
  EXPECT_FALSE(store_->list_checkpoints(job.id, std::nullopt, 10)->items.empty());
  EXPECT_FALSE(fs::exists(dir_.path() / "adapters" / "cancelled"));
  EXPECT_EQ(runner->cancel(job.id).error().code, "conflict");
  EXPECT_EQ(runner->resume(job.id).error().code, "conflict");
}

TEST_F(JobRunnerTest, PauseAndResumeContinueFromTheCheckpointWithoutRepeatingASteps) {
  auto runner = JobRunner::start(*store_, options("ok", 20)).value();
  auto created = runner->create(spec(), "paused");
  wait_until(created->id, [](const JobRecord& j) { return j.checkpoint_step >= 2; });
  auto paused = runner->pause(created->id);
  ASSERT_TRUE(paused) << paused.error().message;
  EXPECT_EQ(paused->status, JobStatus::paused);
  JobRecord job = wait_status(created->id, JobStatus::paused);
  EXPECT_EQ(job.pause_reason, PauseReason::user);
  const int64_t stopped_at = job.checkpoint_step;
  EXPECT_TRUE(has_message(job.id, "Job paused at step " + std::to_string(stopped_at)));
  EXPECT_EQ(runner->pause(job.id).error().code, "conflict");
  ASSERT_TRUE(runner->resume(job.id));
  job = wait_status(job.id, JobStatus::succeeded);
  EXPECT_EQ(train_steps(job.id), one_to(20));
  EXPECT_TRUE(has_message(job.id, "Resumed from step " + std::to_string(stopped_at)));
}

TEST_F(JobRunnerTest, AShutdownPausesRunningJobsAndTheNextRunnerResumesThem) {
  std::string id;
  {
    auto runner = JobRunner::start(*store_, options("ok", 20)).value();
    id = runner->create(spec(), "across")->id;
    wait_until(id, [](const JobRecord& j) { return j.checkpoint_step >= 2; });
  }
  JobRecord job = *store_->job(id);
  EXPECT_EQ(job.status, JobStatus::paused);
  EXPECT_EQ(job.pause_reason, PauseReason::shutdown);
  EXPECT_EQ(job.pid, 0);
  auto runner = JobRunner::start(*store_, options("ok", 20)).value();
  job = wait_status(id, JobStatus::succeeded);
  EXPECT_EQ(train_steps(id), one_to(20));
  EXPECT_TRUE(has_message(id, "The server started again; the job resumes from step"));
}

TEST_F(JobRunnerTest, AJobLeftRunningByADeadServerResumesAfterReadingItsLog) {
  // What a server killed mid-run leaves: the job marked running, events the
  // trainer wrote that the server never recorded (the last one cut), the
  // trainer's checkpoint at step 2, and a stray trainer still alive.
  JobRecord job;
  job.id = "ftjob-orphan";
  job.created_at = unix_now();
  job.spec = spec();
  job.status = JobStatus::running;
  job.adapter_id = "orphan";
  job.work_dir = dir_.path() / "jobs" / job.id;
  fs::create_directories(job.work_dir / "train");
  ChildOptions stray;
  stray.argv = {"/bin/sh", "-c", "sleep 30; exit 0", (job.work_dir / "train").string()};
  stray.stdout_path = stray.stderr_path = dir_.path() / "stray.log";
  stray.parent_death_signal = 0;
  auto stray_child = ChildProcess::spawn(stray).value();
  job.pid = stray_child->pid();
  ASSERT_TRUE(store_->create_job(job, {}));
  {
    std::ofstream config(job.work_dir / "train" / "config");
    config << "id=orphan\nstore=" << (dir_.path() / "adapters").string() << "\ndata=x\n";
    std::ofstream(job.work_dir / "train" / "checkpoint") << "2\n";
    std::ofstream log(job.work_dir / "trainer-events.jsonl");
    log << R"({"type":"start","total_steps":6,"train_examples":8,"resumed_from":0})"
        << "\n";
    for (int step = 1; step <= 3; ++step) {
      log << R"({"type":"step","step":)" << step << R"(,"total_steps":6,"train_loss":1.5,"tokens":)"
          << step * 10 << "}\n";
      if (step == 2)
        log << R"({"type":"checkpoint","step":2,"path":"ckpt-2"})"
            << "\n";
    }
    log << R"({"type":"step","st)";
  }

  auto runner = JobRunner::start(*store_, options("ok")).value();
  EXPECT_EQ(stray_child->wait().signal, SIGTERM);
  JobRecord done = wait_status(job.id, JobStatus::succeeded);
  EXPECT_EQ(train_steps(job.id), one_to(6));
  EXPECT_TRUE(has_message(job.id, "The server stopped while the job ran; it resumes from step 2"));
  EXPECT_TRUE(has_message(job.id, "Resumed from step 2"));
  EXPECT_EQ(done.failures, 0);
}

TEST_F(JobRunnerTest, JobsRunOneAtATimeInTheOrderTheyCame) {
  auto runner = JobRunner::start(*store_, options("ok", 4)).value();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(runner->create(spec(), "queued-" + std::to_string(i))->id);
  for (const std::string& id : ids) wait_status(id, JobStatus::succeeded);
  auto seq_of = [&](const std::string& id, const std::string& message) {
    for (const JobEvent& e : events(id)) {
      if (e.message == message) return e.seq;
    }
    return int64_t{-1};
  };
  for (size_t i = 1; i < ids.size(); ++i) {
    EXPECT_GT(seq_of(ids[i], "Fine-tuning job started"),
              seq_of(ids[i - 1], "The job has successfully completed"));
  }
}

TEST_F(JobRunnerTest, WithTwoSlotsTwoJobsTrainAtOnce) {
  RunnerOptions o = options("ok", 30);
  o.max_running = 2;
  auto runner = JobRunner::start(*store_, o).value();
  const std::string a = runner->create(spec(), "a")->id;
  const std::string b = runner->create(spec(), "b")->id;
  wait_until(a, [](const JobRecord& j) { return j.last_step >= 1; });
  wait_until(b, [](const JobRecord& j) { return j.last_step >= 1; });
  EXPECT_NE(store_->job(a)->status, JobStatus::succeeded);
  wait_status(a, JobStatus::succeeded);
  wait_status(b, JobStatus::succeeded);
}

TEST_F(JobRunnerTest, ATrainerThatIgnoresSigtermIsKilledAfterTheGracePeriod) {
  RunnerOptions o = options("deaf", 1000);
  o.stop_grace = 300ms;
  auto runner = JobRunner::start(*store_, o).value();
  const std::string id = runner->create(spec(), "deaf")->id;
  wait_until(id, [](const JobRecord& j) { return j.last_step >= 1; });
  ASSERT_TRUE(runner->cancel(id));
  JobRecord job = wait_until(
      id, [](const JobRecord& j) { return j.pid == 0; }, 10s);
  EXPECT_EQ(job.status, JobStatus::cancelled);
}

TEST_F(JobRunnerTest, AFileChangedOnDiskFailsValidation) {
  auto runner = JobRunner::start(*store_, options("ok")).value();
  JobSpec s = spec();
  { std::ofstream(s.training_path, std::ios::app) << "{\"text\": \"sneaked in\"}\n"; }
  JobRecord job = wait_status(runner->create(s, "changed")->id, JobStatus::failed);
  ASSERT_TRUE(job.error);
  EXPECT_EQ(job.error->param, "training_file");
  EXPECT_NE(job.error->message.find("changed on disk"), std::string::npos) << job.error->message;
  EXPECT_FALSE(job.started_at);
}

TEST_F(JobRunnerTest, AQueuedJobCanBeCancelledOrPausedWithoutATrainer) {
  RunnerOptions o = options("ok", 1000);
  auto runner = JobRunner::start(*store_, o).value();
  const std::string first = runner->create(spec(), "first")->id;
  const std::string second = runner->create(spec(), "second")->id;
  const std::string third = runner->create(spec(), "third")->id;
  wait_until(first, [](const JobRecord& j) { return j.status == JobStatus::running; });
  wait_until(third, [](const JobRecord& j) { return j.status == JobStatus::queued; });
  EXPECT_EQ(runner->cancel(second)->status, JobStatus::cancelled);
  EXPECT_EQ(runner->pause(third)->status, JobStatus::paused);
  EXPECT_EQ(runner->resume(third)->status, JobStatus::queued);
  ASSERT_TRUE(runner->cancel(first));
  wait_until(third, [](const JobRecord& j) { return j.status == JobStatus::running; });
  EXPECT_EQ(store_->job(second)->started_at, std::nullopt);
  ASSERT_TRUE(runner->cancel(third));
}

}  // namespace
}  // namespace graft

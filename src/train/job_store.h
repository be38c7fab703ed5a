// JobStore: training jobs, their events and checkpoints, and the uploaded
// files they train on, in one SQLite database (WAL). Every change of a job is
// one transaction (a read, the change, its events, the commit), so a crash
// leaves the state before or after it, never half. Thread-safe.
//
// Subscribers hear about every commit that adds events to a job (the SSE
// stream reads what is new from there).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "train/job_db.h"
#include "train/job_spec.h"

namespace graft {

enum class JobStatus { validating_files, queued, running, paused, succeeded, failed, cancelled };

std::string_view status_name(JobStatus status);
std::optional<JobStatus> parse_status(std::string_view name);
bool is_final(JobStatus status);   // succeeded, failed, cancelled
bool is_active(JobStatus status);  // may still run: validating_files, queued, running, paused

// Why a job is paused: the user asked, or the server shut down (resumed at its next start).
enum class PauseReason { none, user, shutdown };

struct JobError {
  std::string code;
  std::string message;
  std::string param;  // the request field at fault, or ""
};

struct FileRecord {
  std::string id;
  std::string filename;
  std::string purpose;
  int64_t bytes = 0;
  std::string sha256;
  int64_t rows = 0;
  fs::path path;
  int64_t created_at = 0;
};

struct JobRecord {
  std::string id;
  int64_t created_at = 0;
  JobSpec spec;
  JobStatus status = JobStatus::validating_files;
  std::string adapter_id;  // what the finished adapter is called in the store
  fs::path work_dir;       // the job's folder: the trainer's job dir and its logs
  std::optional<std::string> fine_tuned_model;
  int64_t trained_tokens = 0;
  int64_t total_steps = 0;           // 0 until the trainer says
  int64_t last_step = 0;             // the last step event recorded
  int64_t last_val_step = -1;        // the last validation event recorded (-1: none)
  int64_t checkpoint_step = 0;       // the last checkpoint recorded (0: none)
  std::optional<double> train_loss;  // the latest ones
  std::optional<double> valid_loss;
  std::optional<int64_t> estimated_finish;
  std::optional<int64_t> started_at;
  std::optional<int64_t> finished_at;
  std::optional<JobError> error;
  PauseReason pause_reason = PauseReason::none;
  int64_t pid = 0;            // the running trainer's process (0: none)
  int64_t failures = 0;       // trainer crashes so far (each one retried, up to a limit)
  int64_t events_offset = 0;  // bytes of the trainer's event log already recorded
  int64_t queue_seq = 0;      // queued jobs start in this order
};

struct JobEvent {
  int64_t seq = 0;  // the event's id, increasing across the whole store
  std::string job_id;
  int64_t created_at = 0;
  std::string level = "info";    // info, warn, error
  std::string type = "message";  // message or metrics
  std::string message;
  json data = nullptr;
};

struct CheckpointRecord {
  int64_t seq = 0;
  std::string job_id;
  int64_t step = 0;
  std::string path;
  int64_t created_at = 0;
  json metrics = json::object();
};

// What one job change adds besides the job's own row.
struct JobChanges {
  std::vector<JobEvent> events;  // seq, job_id and created_at are filled in
  std::vector<CheckpointRecord> checkpoints;
  bool to_back_of_queue = false;  // give the job a queue position after every other
};

template <typename T>
struct Page {
  std::vector<T> items;
  bool has_more = false;
};

int64_t unix_now();
// A fresh random id: prefix + 24 lowercase hex digits ("ftjob-…", "file-…").
std::string new_id(std::string_view prefix);

class JobStore {
 public:
  static Result<std::unique_ptr<JobStore>> open(const fs::path& database);
  ~JobStore();

  // Files.
  Status add_file(const FileRecord& file);
  Result<FileRecord> file(std::string_view id);
  // Newest first (or oldest first); after: a file id (the page starts after it).
  Result<Page<FileRecord>> list_files(std::string_view after, int limit, bool oldest_first = false);
  // Removes the record ("conflict" while an active job uses the file) and returns it.
  Result<FileRecord> remove_file(std::string_view id);

  // Jobs. create_job fails with "conflict" if an active job already makes the same adapter.
  Result<JobRecord> create_job(JobRecord job, JobChanges changes);
  Result<JobRecord> job(std::string_view id);
  Result<Page<JobRecord>> list_jobs(std::string_view after, int limit);  // newest first
  std::vector<JobRecord> jobs_with_status(JobStatus status);             // in queue order
  // Reads the job, lets `change` modify it and add events, and commits all at
  // once. An error from `change` rolls back and is returned.
  Result<JobRecord> update_job(std::string_view id,
                               const std::function<Status(JobRecord& job, JobChanges& changes)>& change);

  // Events: a page newest first (after: an event seq), or every event after a seq, oldest first.
  Result<Page<JobEvent>> list_events(std::string_view job_id, std::optional<int64_t> after, int limit);
  struct EventsSince {
    std::vector<JobEvent> events;
    JobStatus status;   // the job's status when they were read
    bool more = false;  // more events follow (the limit was reached)
  };
  Result<EventsSince> events_since(std::string_view job_id, int64_t seq, int limit);
  Result<Page<CheckpointRecord>> list_checkpoints(std::string_view job_id, std::optional<int64_t> after,
                                                  int limit);

  // Calls `fn` (on the committing thread, no lock held) after each commit that
  // adds events to the job. Returns a token for unsubscribe().
  int64_t subscribe(std::string job_id, std::function<void()> fn);
  void unsubscribe(int64_t token);
  void unsubscribe_all();

 private:
  explicit JobStore(std::unique_ptr<Database> db) : db_(std::move(db)) {}
  void create_schema();
  JobRecord read_job(Statement& s);
  std::optional<JobRecord> find_job(std::string_view id);
  void write_job(const JobRecord& job);
  void insert_changes(const std::string& job_id, JobChanges& changes);
  void notify(const std::string& job_id);

  std::mutex mutex_;
  std::unique_ptr<Database> db_;

  std::mutex subscribers_mutex_;
  int64_t next_token_ = 1;
  struct Subscriber {
    std::string job_id;
    std::shared_ptr<std::function<void()>> fn;
  };
  std::map<int64_t, Subscriber> subscribers_;
};

}  // namespace graft

// Training over HTTP, in OpenAI's shapes so the official SDKs drive it:
//   POST   /v1/files                          upload (multipart, purpose "fine-tune"): JSONL checked, sha256
//   kept GET    /v1/files, /v1/files/{id}          list (after, limit, order), one file GET
//   /v1/files/{id}/content             the bytes DELETE /v1/files/{id}                     409 while a
//   queued, running or paused job uses it POST   /v1/fine_tuning/jobs               start a job
//   (fine_tuning_request.h) GET    /v1/fine_tuning/jobs               list (after, limit), newest first GET
//   /v1/fine_tuning/jobs/{id}          one job POST   /v1/fine_tuning/jobs/{id}/cancel, /pause, /resume GET
//   /v1/fine_tuning/jobs/{id}/events   a page (after, limit), newest first; with
//                                             stream=true, server-sent events oldest first,
//                                             each with an id (Last-Event-ID resumes)
//   GET    /v1/fine_tuning/jobs/{id}/checkpoints
// Jobs run as `graft train --json` children (train/job_runner.h); jobs,
// events, files and checkpoints live in SQLite in graft's data folder. One
// server at a time runs a data folder's jobs: another one answers these routes
// with a 503 that says which process has them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/routes_adapters.h"
#include "server/server.h"
#include "server/worker.h"
#include "train/job_files.h"
#include "train/job_runner.h"

namespace graft::server {

struct TrainingOptions {
  fs::path model_path;               // the served model's GGUF file (the trainer's base)
  fs::path data_dir;                 // jobs.sqlite, files/, jobs/; "": graft's data folder
  std::vector<std::string> trainer;  // the training command: {"/path/to/graft", "train"}
  fs::path adapter_store;            // where finished adapters land; "": the user's store
  int max_jobs = 1;                  // jobs trained at once
  int priority = 19;                 // the trainers' niceness, or kIdlePriority
  int threads = 0;                   // the trainers' --threads (0: theirs)
  int max_retries = 2;               // trainer crashes retried per job
  size_t max_upload = size_t{512} << 20;
  std::vector<fs::path> data_dirs;              // folders whose files /v1/files/inspect may read by path
  std::chrono::milliseconds stop_grace{30000};  // a stopping trainer is killed after this
};

class TrainingService {
 public:
  // Opens the job store and starts the runner (which resumes the jobs a
  // previous server left). `adapters` (may be null) loads adapters of jobs
  // created with auto_load.
  static Result<std::unique_ptr<TrainingService>> create(ServedModel& model, TrainingOptions options,
                                                         AdapterService* adapters);
  // Ends the event streams, then stops the runner: running jobs are paused
  // and resume when a server starts again. Destroy it after the HTTP server
  // stopped and before the adapter service goes.
  ~TrainingService();
  TrainingService(const TrainingService&) = delete;
  TrainingService& operator=(const TrainingService&) = delete;

  void install(Server& server);
  // "" when this server runs the jobs; else why not (the 503's message).
  const std::string& unavailable() const { return unavailable_; }

 private:
  class EventStream;
  TrainingService(ServedModel& model, TrainingOptions options, AdapterService* adapters);

  void add_file_routes(Router& router);
  void add_job_routes(Router& router);
  void create_job(HttpRequest& http, std::shared_ptr<Exchange> exchange);
  void stream_events(HttpRequest& http, std::shared_ptr<Exchange> exchange);
  void auto_load(const JobRecord& job);
  // Reads a data file as the trainer will (every line's shape, tokens).
  Result<Dataset> read_dataset(const fs::path& path, const EncodeOptions& options, DataLocation* where) const;

  ServedModel& model_;
  TrainingOptions options_;
  AdapterService* adapters_;
  std::string unavailable_;
  int lock_fd_ = -1;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<FileStore> files_;
  std::unique_ptr<Worker> worker_;          // route work that touches the disk or the store
  std::unique_ptr<Worker> inspect_worker_;  // reading whole datasets, which takes longer
  std::unique_ptr<JobRunner> runner_;
};

}  // namespace graft::server

// Worker: one background thread for route work that may wait (adapter
// files, the job store, dataset reads, the engine thread), so the HTTP
// threads never do. Jobs run one at a time in the order posted; the
// destructor finishes the ones queued, then joins. Every job posted with an
// exchange answers it: a job that throws gets a 500 in OpenAI's error shape,
// never silence.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "server/http.h"

namespace graft::server {

class Worker {
 public:
  explicit Worker(std::string name = "background job");
  ~Worker();  // runs the jobs still queued, then joins
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Runs job on the worker thread; it answers `exchange` itself, unless it throws.
  void post(std::shared_ptr<Exchange> exchange, std::function<void()> job);
  // A job with no exchange to answer (it reports through its own callback); a throw is logged.
  void post(std::function<void()> job) { post(nullptr, std::move(job)); }

 private:
  struct Job {
    std::shared_ptr<Exchange> exchange;  // null: nothing to answer
    std::function<void()> run;
  };
  void loop();

  std::string name_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace graft::server

// Worker: one background thread for the slow part of a route (reading
// adapter files, waiting for the engine thread), so the HTTP threads never
// wait on it. Every job answers its exchange: a job that throws gets a 500
// in OpenAI's error shape, never silence.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "server/http.h"

namespace graft::server {

class Worker {
 public:
  Worker();
  ~Worker();  // runs the jobs still queued, then joins
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Runs job on the worker thread; it answers `exchange` itself, unless it throws.
  void post(std::shared_ptr<Exchange> exchange, std::function<void()> job);

 private:
  struct Job {
    std::shared_ptr<Exchange> exchange;
    std::function<void()> run;
  };
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace graft::server

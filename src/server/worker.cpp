#include "server/worker.h"

#include <exception>

#include "util/log.h"

namespace graft::server {

Worker::Worker(std::string name) : name_(std::move(name)), thread_([this] { loop(); }) {}

Worker::~Worker() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Worker::post(std::shared_ptr<Exchange> exchange, std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(Job{std::move(exchange), std::move(job)});
  }
  wake_.notify_one();
}

void Worker::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, and every job done
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    std::string failure;
    try {
      job.run();
    } catch (const std::exception& e) {
      failure = e.what();
    } catch (...) {
      failure = "unknown exception";
    }
    if (!failure.empty()) {
      GRAFT_LOG_ERROR("{} failed: {}", name_, failure);
      if (job.exchange) {  // ignored if the job had answered already
        job.exchange->send_error(api_error(ApiCode::kInternal, "internal error: " + failure));
      }
    }
    lock.lock();
  }
}

}  // namespace graft::server

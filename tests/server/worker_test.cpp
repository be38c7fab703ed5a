// The background worker of the adapter routes: every job answers its
// exchange, even one that throws.
#include "server/worker.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <stdexcept>

namespace graft::server {
namespace {

// Records what a handler answered.
class RecordingExchange : public Exchange {
 public:
  void send(HttpResponse response) override {
    std::lock_guard lock(mutex_);
    responses_.push_back(std::move(response));
    cv_.notify_all();
  }
  void start_events() override {}
  void send_event(std::string) override {}
  void send_event_with_id(std::string, std::string) override {}
  void send_named_event(std::string, std::string) override {}
  void end_events() override {}
  void post(std::function<void()> fn) override { fn(); }
  void on_disconnect(std::function<void()>) override {}

  // The first answer, waiting for it.
  HttpResponse answer() {
    std::unique_lock lock(mutex_);
    EXPECT_TRUE(cv_.wait_for(lock, std::chrono::seconds(10), [&] { return !responses_.empty(); }));
    return responses_.empty() ? HttpResponse{0, "", "", {}} : responses_.front();
  }
  size_t answers() {
    std::lock_guard lock(mutex_);
    return responses_.size();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<HttpResponse> responses_;
};

TEST(Worker, AJobThatThrowsStillAnswersWithA500) {
  Worker worker;
  auto throwing = std::make_shared<RecordingExchange>();
  worker.post(throwing, [] { throw std::runtime_error("the adapter file vanished"); });
  HttpResponse failed = throwing->answer();
  EXPECT_EQ(failed.status, 500);
  json error = json::parse(failed.body)["error"];
  EXPECT_EQ(error["type"], "server_error");
  EXPECT_NE(error["message"].get<std::string>().find("the adapter file vanished"), std::string::npos);
  // The worker goes on with the next job, which answers for itself.
  auto next = std::make_shared<RecordingExchange>();
  worker.post(next, [next] { next->send_json(200, json{{"ok", true}}); });
  EXPECT_EQ(next->answer().status, 200);
  EXPECT_EQ(next->answers(), 1u);
}

TEST(Worker, FinishesQueuedJobsBeforeItStops) {
  auto exchange = std::make_shared<RecordingExchange>();
  {
    Worker worker;
    for (int i = 0; i < 5; ++i) {
      worker.post(exchange, [exchange, i] { exchange->send_json(200, json{{"i", i}}); });
    }
  }
  EXPECT_EQ(exchange->answers(), 5u);
}

}  // namespace
}  // namespace graft::server

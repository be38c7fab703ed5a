// The engine thread on a fake model: events, batching = alone, stop strings,
// cancel, prefix reuse, failures, stats.
#include "engine/engine.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <thread>

#include "engine/fake_executor.h"

namespace graft {
namespace {

using testing::FakeExecutor;
using testing::FakeTokenText;
using namespace std::chrono_literals;

// Collects one request's events; wait() returns once the final event came.
class Collector {
 public:
  EventSink sink() {
    return [this](GenerationEvent&& e) {
      std::lock_guard lock(mutex_);
      EXPECT_FALSE(done_) << "event after the final one";
      text_ += e.text;
      for (auto& t : e.tokens) tokens_.push_back(t);
      events_++;
      if (e.done) {
        done_ = true;
        final_ = e;
        cv_.notify_all();
      }
    };
  }
  const GenerationEvent& wait() {
    std::unique_lock lock(mutex_);
    EXPECT_TRUE(cv_.wait_for(lock, 20s, [&] { return done_; })) << "no final event";
    return final_;
  }
  std::string text() {
    std::lock_guard lock(mutex_);
    return text_;
  }
  std::vector<TokenId> ids() {
    std::lock_guard lock(mutex_);
    std::vector<TokenId> v;
    for (auto& t : tokens_) v.push_back(t.id);
    return v;
  }
  std::vector<GeneratedToken> tokens() {
    std::lock_guard lock(mutex_);
    return tokens_;
  }
  int events() {
    std::lock_guard lock(mutex_);
    return events_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::string text_;
  std::vector<GeneratedToken> tokens_;
  int events_ = 0;
  bool done_ = false;
  GenerationEvent final_;
};

std::vector<TokenId> prompt_of(int n, TokenId first) {
  std::vector<TokenId> v(n);
  for (int i = 0; i < n; ++i) v[i] = 1 + (first + i) % 26;
  return v;
}

GenerationRequest request(std::vector<TokenId> prompt, int max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return r;
}

struct Harness {
  explicit Harness(FakeExecutor::Options options = {}, EngineConfig config = {}) {
    auto fake = std::make_unique<FakeExecutor>(options);
    executor = fake.get();
    engine = std::make_unique<Engine>(std::move(fake), std::make_shared<FakeTokenText>(), config);
  }
  template <typename Pred>
  bool eventually(Pred pred) {
    for (int i = 0; i < 2000; ++i) {
      if (pred()) return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }
  FakeExecutor* executor;
  std::unique_ptr<Engine> engine;
};

TEST(Engine, GeneratesWhatTheModelGivesAloneAndReportsUsage) {
  Harness h;
  Collector c;
  auto prompt = prompt_of(12, 3);
  auto id = h.engine->submit(request(prompt, 10), c.sink());
  ASSERT_TRUE(id.ok());
  const GenerationEvent& done = c.wait();
  auto expected = FakeExecutor::expected(prompt, 10, 27);
  EXPECT_EQ(c.ids(), expected);
  EXPECT_EQ(c.text(), FakeTokenText::text_of(expected));
  EXPECT_EQ(done.finish_reason, FinishReason::kLength);
  EXPECT_EQ(done.usage.prompt_tokens, 12);
  EXPECT_EQ(done.usage.completion_tokens, 10);
  EXPECT_EQ(done.usage.cached_tokens, 0);
  EXPECT_GT(done.timings.ttft_ms, 0);
}

TEST(Engine, ConcurrentRequestsGiveTheSameTokensAsEachAlone) {
  FakeExecutor::Options options;
  EngineConfig config;
  config.step_tokens = 16;  // long prompts are chunked while others decode
  config.prefix_cache = false;
  Harness h(options, config);
  std::vector<std::vector<TokenId>> prompts = {prompt_of(40, 1), prompt_of(5, 7),  prompt_of(23, 2),
                                               prompt_of(9, 11), prompt_of(31, 4), prompt_of(3, 20)};
  std::vector<std::unique_ptr<Collector>> collectors;
  for (auto& p : prompts) {
    collectors.push_back(std::make_unique<Collector>());
    ASSERT_TRUE(h.engine->submit(request(p, 20), collectors.back()->sink()).ok());
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    collectors[i]->wait();
    EXPECT_EQ(collectors[i]->ids(), FakeExecutor::expected(prompts[i], 20, 27)) << "request " << i;
  }
  EXPECT_GT(h.executor->max_rows_seen(), 1);
  EXPECT_LE(h.executor->max_rows_seen(), 16);
}

TEST(Engine, StopsBeforeAStopStringAndNeverSendsIt) {
  Harness h;
  auto prompt = prompt_of(6, 5);
  std::string alone = FakeTokenText::text_of(FakeExecutor::expected(prompt, 30, 27));
  std::string stop = alone.substr(10, 3);
  size_t cut = alone.find(stop);
  GenerationRequest r = request(prompt, 30);
  r.stop = {stop};
  Collector c;
  ASSERT_TRUE(h.engine->submit(r, c.sink()).ok());
  const GenerationEvent& done = c.wait();
  EXPECT_EQ(done.finish_reason, FinishReason::kStop);
  EXPECT_EQ(c.text(), alone.substr(0, cut));
}

TEST(Engine, EndOfGenerationStopsUnlessIgnored) {
  FakeExecutor::Options options;
  options.eog_every = 4;
  Harness h(options);
  // Find a prompt whose output hits end-of-generation early.
  std::vector<TokenId> prompt;
  std::vector<TokenId> alone;
  for (TokenId first = 0; first < 26; ++first) {
    prompt = prompt_of(5, first);
    alone = FakeExecutor::expected(prompt, 20, 27, 4);
    if (alone.size() < 20 && alone.size() > 1) break;
  }
  ASSERT_EQ(alone.back(), 0);
  Collector c;
  ASSERT_TRUE(h.engine->submit(request(prompt, 20), c.sink()).ok());
  EXPECT_EQ(c.wait().finish_reason, FinishReason::kStop);
  EXPECT_EQ(c.ids(), alone);
  EXPECT_EQ(c.text(), FakeTokenText::text_of(alone));

  GenerationRequest r = request(prompt, 20);
  r.ignore_eos = true;
  Collector all;
  ASSERT_TRUE(h.engine->submit(r, all.sink()).ok());
  EXPECT_EQ(all.wait().finish_reason, FinishReason::kLength);
  EXPECT_EQ(all.ids().size(), 20u);
}

TEST(Engine, CancelEndsARunningRequestAndFreesItsKv) {
  FakeExecutor::Options options;
  options.step_delay = 2ms;
  Harness h(options);
  Collector c;
  auto id = h.engine->submit(request(prompt_of(10, 1), -1), c.sink());
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(h.eventually([&] { return c.events() >= 3; }));
  h.engine->cancel(*id);
  const GenerationEvent& done = c.wait();
  EXPECT_EQ(done.finish_reason, FinishReason::kCancelled);
  ASSERT_TRUE(h.eventually([&] { return h.executor->cells_used() == 0; }));
  ASSERT_TRUE(h.eventually([&] { return h.engine->stats().kv_tokens == 0; }));
  EngineStats stats = h.engine->stats();
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.requests_cancelled, 1u);
  EXPECT_EQ(stats.prefix_cache_entries, 0);  // cancelled sequences are not kept
}

TEST(Engine, CancelDropsAWaitingRequest) {
  FakeExecutor::Options options;
  options.step_delay = 2ms;
  EngineConfig config;
  config.max_running = 1;
  Harness h(options, config);
  Collector first, second;
  ASSERT_TRUE(h.engine->submit(request(prompt_of(4, 1), 50), first.sink()).ok());
  auto id = h.engine->submit(request(prompt_of(4, 2), 50), second.sink());
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(h.eventually([&] { return h.engine->stats().waiting == 1; }));
  h.engine->cancel(*id);
  EXPECT_EQ(second.wait().finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(second.ids().size(), 0u);
  EXPECT_EQ(first.wait().finish_reason, FinishReason::kLength);
}

TEST(Engine, RefusesRequestsThatCanNeverRun) {
  FakeExecutor::Options options;
  options.n_ctx = 64;
  options.kv_cells = 100;
  Harness h(options);
  Collector c;
  auto too_long = h.engine->submit(request(prompt_of(64, 1), 5), c.sink());
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.error().code, "context_length_exceeded");
  auto bad_token = h.engine->submit(request({1, 2, 99}, 5), c.sink());
  ASSERT_FALSE(bad_token.ok());
  EXPECT_NE(bad_token.error().message.find("99"), std::string::npos);
  auto empty = h.engine->submit(request({}, 5), c.sink());
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(c.events(), 0);
  // A long generation is cut at the context instead.
  Collector ok;
  ASSERT_TRUE(h.engine->submit(request(prompt_of(60, 1), 1000), ok.sink()).ok());
  EXPECT_EQ(ok.wait().finish_reason, FinishReason::kLength);
  EXPECT_EQ(ok.ids().size(), 4u);
}

TEST(Engine, RefusesRequestsBeyondTheWaitingLimit) {
  FakeExecutor::Options options;
  options.step_delay = 5ms;
  EngineConfig config;
  config.max_running = 1;
  config.max_waiting = 2;
  Harness h(options, config);
  std::vector<std::unique_ptr<Collector>> cs;
  int refused = 0;
  for (int i = 0; i < 6; ++i) {
    cs.push_back(std::make_unique<Collector>());
    auto id = h.engine->submit(request(prompt_of(4, i), 30), cs.back()->sink());
    if (!id) {
      EXPECT_EQ(id.error().code, "overloaded");
      ++refused;
      cs.pop_back();
    }
  }
  EXPECT_GE(refused, 3);
  for (auto& c : cs) EXPECT_EQ(c->wait().finish_reason, FinishReason::kLength);
  Collector later;
  ASSERT_TRUE(h.engine->submit(request(prompt_of(4, 9), 2), later.sink()).ok());
  EXPECT_EQ(later.wait().finish_reason, FinishReason::kLength);
}

TEST(Engine, WaitsWhenTheKvBudgetIsFullThenRuns) {
  FakeExecutor::Options options;
  options.kv_cells = 60;
  options.step_delay = 1ms;
  Harness h(options);
  std::vector<std::unique_ptr<Collector>> cs;
  for (int i = 0; i < 4; ++i) {
    cs.push_back(std::make_unique<Collector>());
    ASSERT_TRUE(h.engine->submit(request(prompt_of(10, i), 15), cs.back()->sink()).ok());
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(cs[i]->wait().finish_reason, FinishReason::kLength);
    EXPECT_EQ(cs[i]->ids(), FakeExecutor::expected(prompt_of(10, i), 15, 27));
  }
}

TEST(Engine, ReusesAPromptPrefixAndReportsCachedTokens) {
  Harness h;
  auto system = prompt_of(30, 3);
  auto p1 = system;
  p1.insert(p1.end(), {1, 2, 3});
  auto p2 = system;
  p2.insert(p2.end(), {4, 5});
  Collector a, b;
  ASSERT_TRUE(h.engine->submit(request(p1, 5), a.sink()).ok());
  a.wait();
  ASSERT_TRUE(h.engine->submit(request(p2, 5), b.sink()).ok());
  const GenerationEvent& done = b.wait();
  EXPECT_EQ(done.usage.cached_tokens, 30);
  EXPECT_EQ(b.ids(), FakeExecutor::expected(p2, 5, 27));
  EXPECT_GE(h.executor->copies(), 1);
  EXPECT_EQ(h.engine->stats().cached_prompt_tokens, 30u);
}

TEST(Engine, AFailedStepFailsOnlyItsRequests) {
  FakeExecutor::Options options;
  Harness h(options);
  h.executor->fail_next_steps(1);
  Collector failed;
  ASSERT_TRUE(h.engine->submit(request(prompt_of(5, 1), 5), failed.sink()).ok());
  const GenerationEvent& done = failed.wait();
  EXPECT_EQ(done.finish_reason, FinishReason::kError);
  EXPECT_NE(done.error.find("injected"), std::string::npos);
  Collector next;
  ASSERT_TRUE(h.engine->submit(request(prompt_of(5, 1), 5), next.sink()).ok());
  EXPECT_EQ(next.wait().finish_reason, FinishReason::kLength);
  EXPECT_EQ(next.ids(), FakeExecutor::expected(prompt_of(5, 1), 5, 27));
  EXPECT_EQ(h.engine->stats().requests_failed, 1u);
}

TEST(Engine, AStepThatThrowsEndsOnlyItsRequestsAndTheEngineGoesOn) {
  EngineConfig config;
  config.max_running = 1;  // the second request waits while the first runs
  FakeExecutor::Options options;
  options.step_delay = 2ms;
  Harness h(options, config);
  Collector running, waiting;
  ASSERT_TRUE(h.engine->submit(request(prompt_of(5, 1), 40), running.sink()).ok());
  ASSERT_TRUE(h.eventually([&] { return running.events() >= 1; }));
  ASSERT_TRUE(h.engine->submit(request(prompt_of(5, 2), 5), waiting.sink()).ok());
  h.executor->throw_in_next_steps(1);
  const GenerationEvent& failed = running.wait();
  EXPECT_EQ(failed.finish_reason, FinishReason::kError);
  EXPECT_NE(failed.error.find("injected exception"), std::string::npos) << failed.error;
  EXPECT_EQ(waiting.wait().finish_reason, FinishReason::kLength);
  EXPECT_EQ(waiting.ids(), FakeExecutor::expected(prompt_of(5, 2), 5, 27));
  EXPECT_EQ(h.engine->stats().requests_failed, 1u);
}

TEST(Engine, AFailingRowEndsOnlyItsRequest) {
  FakeExecutor::Options options;
  options.step_delay = 1ms;
  Harness h(options);
  // The request whose prompt starts with token 26 fails at its third token.
  h.executor->fail_rows_where(
      [](const std::vector<TokenId>& seq) { return seq[0] == 26 && seq.size() >= 8; });
  Collector failing, other, later;
  ASSERT_TRUE(h.engine->submit(request(prompt_of(6, 25), 10), failing.sink()).ok());
  ASSERT_TRUE(h.engine->submit(request(prompt_of(6, 3), 10), other.sink()).ok());
  const GenerationEvent& failed = failing.wait();
  EXPECT_EQ(failed.finish_reason, FinishReason::kError);
  EXPECT_NE(failed.error.find("injected row failure"), std::string::npos) << failed.error;
  EXPECT_EQ(failing.ids(), FakeExecutor::expected(prompt_of(6, 25), 2, 27));
  EXPECT_EQ(other.wait().finish_reason, FinishReason::kLength);
  EXPECT_EQ(other.ids(), FakeExecutor::expected(prompt_of(6, 3), 10, 27));
  ASSERT_TRUE(h.engine->submit(request(prompt_of(6, 4), 4), later.sink()).ok());
  EXPECT_EQ(later.wait().finish_reason, FinishReason::kLength);
  EXPECT_EQ(h.engine->stats().requests_failed, 1u);
}

TEST(Engine, ATaskThatThrowsStillAnswersItsCaller) {
  Harness h;
  Status status =
      h.engine->run_on_engine_thread([]() -> Status { throw std::runtime_error("mount exploded"); });
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message.find("mount exploded"), std::string::npos) << status.error().message;
  auto value = h.engine->run_on_engine_thread([] { return Result<int>(42); });
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, 42);
  Collector c;
  ASSERT_TRUE(h.engine->submit(request(prompt_of(5, 1), 3), c.sink()).ok());
  EXPECT_EQ(c.wait().finish_reason, FinishReason::kLength);
}

// Threads of this process under this scheduling policy at this niceness.
int threads_with(int policy, int nice) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    const pid_t tid = std::stoi(entry.path().filename().string());
    errno = 0;
    const int prio = getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
    if (errno == 0 && sched_getscheduler(tid) == policy && prio == nice) ++n;
  }
  return n;
}

TEST(Engine, ComputeThreadsRunAtTheConfiguredPriority) {
  // Relative to the niceness the test runs at (e.g. under `nice -n 19 ctest`).
  errno = 0;
  const int base = getpriority(PRIO_PROCESS, 0);
  ASSERT_EQ(errno, 0);
  for (int nice : {7, EngineConfig::kComputeIdle}) {
    EngineConfig config;
    config.compute_nice = nice;
    Harness h({}, config);
    Collector c;
    ASSERT_TRUE(h.engine->submit(request(prompt_of(5, 1), 3), c.sink()).ok());
    EXPECT_EQ(c.wait().finish_reason, FinishReason::kLength);
    if (nice == EngineConfig::kComputeIdle) {
      EXPECT_EQ(threads_with(SCHED_IDLE, base), 1) << "the engine thread";
    } else {
      EXPECT_EQ(threads_with(SCHED_OTHER, std::min(19, base + nice)), 1) << "the engine thread";
    }
  }
}

TEST(Engine, SamplerErrorsEndTheRequestWithTheReason) {
  Harness h;
  GenerationRequest r = request(prompt_of(5, 1), 5);
  r.sampling.temperature = -1;
  Collector c;
  ASSERT_TRUE(h.engine->submit(r, c.sink()).ok());
  const GenerationEvent& done = c.wait();
  EXPECT_EQ(done.finish_reason, FinishReason::kError);
  EXPECT_NE(done.error.find("temperature"), std::string::npos);
}

TEST(Engine, SendsLogprobsOnlyWhenAsked) {
  Harness h;
  GenerationRequest r = request(prompt_of(5, 1), 3);
  r.top_logprobs = 2;
  Collector with, without;
  ASSERT_TRUE(h.engine->submit(r, with.sink()).ok());
  ASSERT_TRUE(h.engine->submit(request(prompt_of(5, 1), 3), without.sink()).ok());
  with.wait();
  without.wait();
  ASSERT_EQ(with.tokens().size(), 3u);
  EXPECT_EQ(with.tokens()[0].top.size(), 2u);
  EXPECT_LT(with.tokens()[0].logprob, 0);
  EXPECT_TRUE(without.tokens()[0].top.empty());
}

TEST(Engine, RunsTasksBetweenStepsAndTracksAdapterUse) {
  FakeExecutor::Options options;
  options.step_delay = 2ms;
  Harness h(options);
  GenerationRequest r = request(prompt_of(5, 1), 40);
  r.adapters.n = 1;
  r.adapters.slot[0] = 3;
  r.adapters.scale[0] = 1.0f;
  Collector c;
  ASSERT_TRUE(h.engine->submit(r, c.sink()).ok());
  EXPECT_TRUE(h.engine->adapter_slot_in_use(3));
  EXPECT_FALSE(h.engine->adapter_slot_in_use(2));
  auto ran =
      h.engine->run_on_engine_thread([] { return Result<std::thread::id>(std::this_thread::get_id()); });
  ASSERT_TRUE(ran.ok());
  EXPECT_NE(*ran, std::this_thread::get_id());
  c.wait();
  EXPECT_FALSE(h.engine->adapter_slot_in_use(3));
}

TEST(Engine, StatsCountRequestsTokensAndKv) {
  FakeExecutor::Options options;
  options.step_delay = 2ms;
  Harness h(options);
  Collector c;
  auto id = h.engine->submit(request(prompt_of(8, 1), -1), c.sink());
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(h.eventually([&] { return h.engine->stats().kv_tokens > 8; }));
  EngineStats running = h.engine->stats();
  EXPECT_EQ(running.running, 1);
  EXPECT_EQ(running.kv_bytes, running.kv_tokens * 100);
  EXPECT_EQ(running.kv_budget_tokens, 1024);
  EXPECT_GT(running.tokens_per_second, 0);
  h.engine->cancel(*id);
  c.wait();
  ASSERT_TRUE(h.eventually([&] { return h.engine->stats().running == 0; }));
  EngineStats after = h.engine->stats();
  EXPECT_EQ(after.requests_submitted, 1u);
  EXPECT_EQ(after.prompt_tokens, 8u);
  EXPECT_GT(after.completion_tokens, 0u);
}

TEST(Engine, ShutdownCancelsWhatIsLeft) {
  FakeExecutor::Options options;
  options.step_delay = 2ms;
  auto h = std::make_unique<Harness>(options);
  Collector c;
  ASSERT_TRUE(h->engine->submit(request(prompt_of(5, 1), -1), c.sink()).ok());
  ASSERT_TRUE(h->eventually([&] { return c.events() >= 1; }));
  h.reset();
  EXPECT_EQ(c.wait().finish_reason, FinishReason::kCancelled);
}

}  // namespace
}  // namespace graft

// Engine: owns the engine thread, the scheduler and the executor. Any thread
// submits requests and cancels them; the engine thread runs steps (admit,
// batch, forward, sample) and sends each request's events to its sink.
// Finished and cancelled requests free their KV at the next step.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "engine/executor.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/stop_matcher.h"
#include "util/result.h"

namespace graft {

struct EngineConfig {
  int n_ctx = 0;                 // longest sequence; 0: the executor's
  int64_t kv_budget_tokens = 0;  // KV cells for running + cached sequences; 0: the executor's
  int max_running = 4;           // requests in flight at once (--parallel)
  int step_tokens = 512;         // most rows in one step
  bool prefix_cache = true;
  int max_waiting = 1024;  // more queued requests are refused ("overloaded")
  // Niceness of the engine thread and the compute threads it starts: above 0,
  // HTTP threads (and /health) get a core at once while a batch computes.
  // kComputeIdle: they run only when nothing else wants a core (SCHED_IDLE).
  int compute_nice = 5;
  static constexpr int kComputeIdle = 20;
};

// A snapshot for /stats and /health, cheap to take from any thread.
struct EngineStats {
  uint64_t requests_submitted = 0;
  uint64_t requests_finished = 0;  // stop or length
  uint64_t requests_cancelled = 0;
  uint64_t requests_failed = 0;
  int running = 0;
  int waiting = 0;  // queued, including submissions not yet seen by the engine
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
  uint64_t cached_prompt_tokens = 0;  // prompt tokens served from cached prefixes
  double tokens_per_second = 0;       // generated tokens per second over the last few seconds
  uint64_t steps = 0;
  int batch_rows = 0;        // rows in the last step
  int64_t pending_rows = 0;  // prompt tokens not yet computed (running and waiting)
  int64_t kv_tokens = 0;  // KV cells held by running requests (the global layers' of sliding-window models)
  int64_t kv_bytes = 0;   // their bytes, with their windows' (sliding-window models)
  int64_t kv_reserved_tokens = 0;  // projected KV of running requests (admission counts this)
  int64_t kv_budget_tokens = 0;
  int64_t kv_budget_bytes = 0;
  int prefix_cache_entries = 0;
  int64_t prefix_cache_tokens = 0;
  int64_t prefix_cache_bytes = 0;
  // Hybrid models: memory of recurrent states (running and cached sequences'
  // and snapshots; kv_bytes and prefix_cache_bytes include their sequences').
  int64_t state_bytes = 0;
  int64_t state_bytes_per_sequence = 0;
  int state_snapshots = 0;
  // Sliding-window models: cells of the sliding-window layers' own pool held
  // by running and cached sequences (each keeps only its window), and the
  // pool's size (0: no such pool; every layer counts in kv_tokens).
  int64_t kv_window_cells = 0;
  int64_t kv_window_cells_total = 0;
};

class Engine {
 public:
  Engine(std::unique_ptr<Executor> executor, std::shared_ptr<const TokenText> text, EngineConfig config);
  ~Engine();  // cancels what is left and stops the thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // The configuration in effect (zeros resolved from the executor's limits).
  const EngineConfig& config() const { return config_; }
  const ExecutorLimits& limits() const { return limits_; }

  // Queues a request and returns its id at once. A request that can never
  // run (empty or too long a prompt, more KV than the budget, token ids out of
  // range) is refused here with the reason; nothing is sent to the sink then.
  Result<RequestId> submit(GenerationRequest request, EventSink sink);

  // Stops a request; its final event says "cancelled". Unknown or finished
  // ids are ignored.
  void cancel(RequestId id);

  EngineStats stats() const;

  // Runs `task` on the engine thread between two steps (e.g. mounting or
  // unmounting an adapter), waits for it, and returns what it returns: a
  // Status or a Result<T>. It always answers: an exception in the task, or
  // an engine that stops first, comes back as an error. The task must not
  // block for long; the caller waits up to a step, so call it from a worker
  // thread, never from the engine thread or an HTTP thread.
  template <typename Task>
  std::invoke_result_t<Task&> run_on_engine_thread(Task task);

  // Whether any queued, waiting or running request routes rows to this
  // adapter slot.
  bool adapter_slot_in_use(int slot) const;

  // Engine thread only (inside run_on_engine_thread): forget cached prefixes
  // computed with these adapters (before unmounting or reusing a slot).
  void drop_cached_prefixes(const std::function<bool(const AdapterRoute&)>& pred);

 private:
  using Clock = std::chrono::steady_clock;
  struct Active {
    RequestId id = 0;
    GenerationRequest request;
    EventSink sink;
    int max_new = 0;
    std::unique_ptr<RowSampler> sampler;
    std::unique_ptr<TextStream> text;
    std::unique_ptr<StopMatcher> stop;
    int n_generated = 0;
    int cached_tokens = 0;
    Clock::time_point submitted, admitted, first_token, last_token;
  };

  // Queues a task for the engine thread; false once the engine is stopping.
  bool post_task(std::function<void()> task);
  void loop();
  void take_commands(std::unique_lock<std::mutex>& lock);
  void run_tasks(std::vector<std::function<void()>> tasks);
  void start(std::unique_ptr<Active> active);
  void step();
  void on_token(Active& a, const GeneratedToken& token);
  void finish(RequestId id, FinishReason reason, GenerationEvent event, std::string error = {});
  void fail_requests(const std::vector<RequestId>& ids, const std::string& error);
  // A step that threw: its requests end with the error, the others go on.
  void recover_from_failed_step(const std::string& error);
  void publish_stats(int batch_rows, bool count_step = true);
  void count_routes(const AdapterRoute& route, int delta);

  std::unique_ptr<Executor> executor_;
  std::shared_ptr<const TokenText> text_;
  ExecutorLimits limits_;
  EngineConfig config_;
  Scheduler scheduler_;  // engine thread only (check_fits is safe anywhere)
  std::unordered_map<RequestId, std::unique_ptr<Active>> active_;  // engine thread only
  Clock::time_point started_;
  std::deque<std::pair<Clock::time_point, int>> recent_tokens_;  // engine thread only
  // The requests of the step being run (engine thread only): a step that
  // throws ends these. Empty while planning: a throw there ends every request.
  std::vector<RequestId> in_step_;

  mutable std::mutex mutex_;  // guards the members below
  std::condition_variable wake_;
  std::vector<std::unique_ptr<Active>> incoming_;
  std::vector<RequestId> cancels_;
  std::vector<std::function<void()>> tasks_;
  bool stopping_ = false;
  RequestId next_id_ = 1;
  std::map<int, int> slot_users_;  // adapter slot → requests using it
  EngineStats stats_;

  std::thread thread_;
};

template <typename Task>
std::invoke_result_t<Task&> Engine::run_on_engine_thread(Task task) {
  using Answer = std::invoke_result_t<Task&>;
  auto answer = std::make_shared<std::promise<Answer>>();
  std::future<Answer> future = answer->get_future();
  const bool queued = post_task([answer, task = std::move(task)]() mutable {
    try {
      answer->set_value(task());
    } catch (const std::exception& e) {
      answer->set_value(Answer(errorf("internal", "internal error on the engine thread: {}", e.what())));
    } catch (...) {
      answer->set_value(Answer(make_error("internal", "internal error on the engine thread")));
    }
  });
  if (!queued) return Answer(make_error("unavailable", "the engine is shutting down"));
  return future.get();
}

}  // namespace graft

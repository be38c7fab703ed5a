#include "engine/engine.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <set>

#include "util/log.h"
#include "util/priority.h"

namespace graft {

static_assert(EngineConfig::kComputeIdle == kIdlePriority);

namespace {

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

EngineConfig resolve(EngineConfig config, const ExecutorLimits& limits) {
  config.n_ctx = config.n_ctx > 0 ? std::min(config.n_ctx, limits.n_ctx) : limits.n_ctx;
  config.kv_budget_tokens =
      config.kv_budget_tokens > 0 ? std::min(config.kv_budget_tokens, limits.kv_cells) : limits.kv_cells;
  // Every request the context takes must fit the budget alone (the scheduler does the same).
  config.n_ctx = static_cast<int>(std::min<int64_t>(config.n_ctx, config.kv_budget_tokens));
  config.max_running = std::clamp(config.max_running, 1, std::max(limits.max_sequences, 1));
  if (limits.max_batch_rows > 0) config.step_tokens = std::min(config.step_tokens, limits.max_batch_rows);
  config.step_tokens = std::max(config.step_tokens, config.max_running + 1);
  return config;
}

SchedulerConfig scheduler_config(const EngineConfig& config, const ExecutorLimits& limits) {
  SchedulerConfig s;
  s.n_ctx = config.n_ctx;
  s.kv_budget = config.kv_budget_tokens;
  s.max_running = config.max_running;
  s.max_sequences = std::max(limits.max_sequences, config.max_running);
  s.step_tokens = config.step_tokens;
  s.prefix_cache = config.prefix_cache;
  if (limits.state_bytes > 0) {
    // A recurrent state costs as many cells as it has bytes' worth of KV.
    const int64_t per_cell = std::max<int64_t>(limits.kv_bytes_per_token, 1);
    s.state_cells = (limits.state_bytes + per_cell - 1) / per_cell;
    s.max_snapshots = limits.max_state_snapshots;
  }
  s.window = limits.sliding_window;
  return s;
}

}  // namespace

Engine::Engine(std::unique_ptr<Executor> executor, std::shared_ptr<const TokenText> text, EngineConfig config)
    : executor_(std::move(executor)),
      text_(std::move(text)),
      limits_(executor_->limits()),
      config_(resolve(config, limits_)),
      scheduler_(scheduler_config(config_, limits_)),
      started_(Clock::now()) {
  stats_.kv_budget_tokens = config_.kv_budget_tokens;
  stats_.kv_budget_bytes = config_.kv_budget_tokens * limits_.kv_bytes_per_token +
                           limits_.local_cells * limits_.local_bytes_per_cell;
  stats_.kv_window_cells_total = limits_.local_cells;
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Result<RequestId> Engine::submit(GenerationRequest request, EventSink sink) {
  const int n_prompt = static_cast<int>(request.prompt.size());
  for (TokenId t : request.prompt) {
    if (t < 0 || t >= limits_.n_vocab) {
      return errorf("invalid_request", "prompt token id {} is out of range (the vocabulary has {} tokens)", t,
                    limits_.n_vocab);
    }
  }
  if (request.max_tokens == 0) return make_error("invalid_request", "max_tokens must be at least 1");
  const int room = config_.n_ctx - n_prompt;
  int max_new = request.max_tokens < 0 ? room : std::min(request.max_tokens, room);
  GRAFT_TRY_STATUS(scheduler_.check_fits(n_prompt, std::max(max_new, 1)));

  auto active = std::make_unique<Active>();
  active->request = std::move(request);
  active->sink = std::move(sink);
  active->max_new = max_new;
  active->submitted = Clock::now();
  RequestId id;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return make_error("unavailable", "the engine is shutting down");
    if (stats_.waiting >= config_.max_waiting) {
      return errorf("overloaded", "the server is busy: {} requests are already waiting; retry later",
                    stats_.waiting);
    }
    id = next_id_++;
    active->id = id;
    count_routes(active->request.adapters, +1);
    incoming_.push_back(std::move(active));
    stats_.requests_submitted++;
    stats_.waiting++;
  }
  wake_.notify_one();
  return id;
}

void Engine::cancel(RequestId id) {
  {
    std::lock_guard lock(mutex_);
    cancels_.push_back(id);
  }
  wake_.notify_one();
}

bool Engine::post_task(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return false;
    tasks_.push_back(std::move(task));
  }
  wake_.notify_one();
  return true;
}

EngineStats Engine::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

bool Engine::adapter_slot_in_use(int slot) const {
  std::lock_guard lock(mutex_);
  auto it = slot_users_.find(slot);
  return it != slot_users_.end() && it->second > 0;
}

void Engine::drop_cached_prefixes(const std::function<bool(const AdapterRoute&)>& pred) {
  scheduler_.drop_cached_if(pred);
}

void Engine::count_routes(const AdapterRoute& route, int delta) {
  for (int i = 0; i < route.n; ++i) slot_users_[route.slot[i]] += delta;
}

void Engine::loop() {
  // On Linux the niceness and the policy are per thread; ggml's compute
  // threads, started from this one, inherit them.
  // The kernel also counts a core running only SCHED_IDLE threads as free
  // when it places a waking thread, so with kComputeIdle a waking HTTP thread
  // can take a computing core instead of queueing behind whatever holds the other.
  if (int err = lower_cpu_priority(0, config_.compute_nice); err != 0) {
    GRAFT_LOG_WARN("cannot lower the compute threads' priority to {}: {}",
                   config_.compute_nice == EngineConfig::kComputeIdle ? std::string("idle")
                                                                      : std::to_string(config_.compute_nice),
                   std::strerror(err));
  }
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] {
      return stopping_ || !incoming_.empty() || !cancels_.empty() || !tasks_.empty() || scheduler_.has_work();
    });
    if (stopping_) break;
    take_commands(lock);
    lock.unlock();
    try {
      step();
    } catch (const std::exception& e) {
      recover_from_failed_step(e.what());
    } catch (...) {
      recover_from_failed_step("unknown exception");
    }
    lock.lock();
  }
  // Shutting down: tasks queued before still answer, and every request
  // still here ends as cancelled.
  auto incoming = std::move(incoming_);
  auto tasks = std::move(tasks_);
  lock.unlock();
  run_tasks(std::move(tasks));
  for (auto& a : incoming) {
    RequestId id = a->id;
    active_[id] = std::move(a);
  }
  std::vector<RequestId> ids;
  for (auto& [id, a] : active_) ids.push_back(id);
  for (RequestId id : ids) finish(id, FinishReason::kCancelled, {});
}

void Engine::take_commands(std::unique_lock<std::mutex>& lock) {
  auto incoming = std::move(incoming_);
  auto cancels = std::move(cancels_);
  auto tasks = std::move(tasks_);
  incoming_.clear();
  cancels_.clear();
  tasks_.clear();
  lock.unlock();
  run_tasks(std::move(tasks));
  for (auto& a : incoming) start(std::move(a));
  for (RequestId id : cancels) {
    if (active_.count(id)) finish(id, FinishReason::kCancelled, {});
  }
  lock.lock();
}

void Engine::run_tasks(std::vector<std::function<void()>> tasks) {
  // The tasks answer their callers themselves, errors included (see
  // run_on_engine_thread): nothing may escape here.
  for (auto& task : tasks) task();
}

void Engine::start(std::unique_ptr<Active> a) {
  const RequestId id = a->id;
  auto sampler = executor_->new_sampler(a->request.sampling, a->request.prompt, a->request.top_logprobs);
  a->text = text_->open_stream(a->request.special_text);
  a->stop = std::make_unique<StopMatcher>(a->request.stop);
  bool ok = sampler.ok();
  if (ok) {
    a->sampler = std::move(*sampler);
    scheduler_.enqueue(id, a->request.prompt, a->max_new, a->request.adapters);
  }
  active_[id] = std::move(a);
  if (!ok) finish(id, FinishReason::kError, {}, sampler.error().message);
}

void Engine::step() {
  in_step_.clear();
  StepPlan plan = scheduler_.plan_step();
  in_step_ = plan.scheduled;
  for (const Admission& adm : plan.admitted) in_step_.push_back(adm.id);
  const auto now = Clock::now();
  for (const Admission& adm : plan.admitted) {
    Active& a = *active_.at(adm.id);
    a.admitted = now;
    a.cached_tokens = adm.cached_tokens;
  }
  std::set<SeqId> broken;
  for (const KvOp& op : plan.kv_ops) {
    switch (op.kind) {
      case KvOp::Kind::kFree:
        executor_->seq_free(op.seq);
        break;
      case KvOp::Kind::kTruncate:
        executor_->seq_truncate(op.seq, op.n_tokens);
        break;
      case KvOp::Kind::kDropSnapshots:
        executor_->seq_drop_snapshots(op.seq);
        break;
      case KvOp::Kind::kCopyPrefix: {
        Status status = executor_->seq_copy_prefix(op.src, op.seq, op.n_tokens);
        if (!status) {
          GRAFT_LOG_ERROR("KV prefix copy failed: {}", status.error().message);
          broken.insert(op.seq);
        }
        break;
      }
    }
  }
  if (!broken.empty()) {
    std::vector<RequestId> ids;
    for (const Admission& adm : plan.admitted) {
      if (broken.count(adm.seq)) ids.push_back(adm.id);
    }
    std::erase_if(plan.batch.rows, [&](const BatchRow& r) { return broken.count(r.seq) > 0; });
    std::erase_if(plan.samplers, [&](RequestId id) { return std::count(ids.begin(), ids.end(), id) > 0; });
    fail_requests(ids, "the KV cache could not reuse a cached prefix");
  }
  if (plan.batch.size() == 0) {
    in_step_.clear();
    publish_stats(0);
    return;
  }
  // Admissions and frees show in /stats while the batch computes.
  publish_stats(static_cast<int>(plan.batch.size()), /*count_step=*/false);

  std::vector<RowSampler*> samplers;
  samplers.reserve(plan.samplers.size());
  for (RequestId id : plan.samplers) samplers.push_back(active_.at(id)->sampler.get());
  const auto t0 = Clock::now();
  auto sampled = executor_->step(plan.batch, samplers);
  GRAFT_LOG_DEBUG("step: {} rows, {} outputs, {:.1f} ms", plan.batch.size(), samplers.size(),
                  std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  if (!sampled || sampled->size() != samplers.size()) {
    std::string error =
        sampled ? "the executor returned the wrong number of tokens" : sampled.error().message;
    GRAFT_LOG_ERROR("batch of {} rows failed: {}", plan.batch.size(), error);
    std::set<RequestId> ids(plan.scheduled.begin(), plan.scheduled.end());
    fail_requests(std::vector<RequestId>(ids.begin(), ids.end()), error);
    in_step_.clear();
    publish_stats(static_cast<int>(plan.batch.size()));
    return;
  }
  for (SeqId seq : plan.snapshots) {
    Status kept = executor_->seq_snapshot(seq);
    if (!kept) {
      GRAFT_LOG_WARN("cannot keep sequence {}'s recurrent state: {}", seq, kept.error().message);
      scheduler_.forget_snapshot(seq);
    }
  }
  int tokens = 0;
  for (size_t i = 0; i < samplers.size(); ++i) {
    // Each row stands alone: its failure ends its own request, no other.
    const RequestId id = plan.samplers[i];
    const RowResult& row = (*sampled)[i];
    if (!row) {
      GRAFT_LOG_ERROR("request {}: {}", id, row.error().message);
      finish(id, FinishReason::kError, {}, row.error().message);
      continue;
    }
    try {
      on_token(*active_.at(id), *row);
      ++tokens;
    } catch (const std::exception& e) {
      GRAFT_LOG_ERROR("request {}: cannot take its token: {}", id, e.what());
      finish(id, FinishReason::kError, {}, std::string("internal error: ") + e.what());
    }
  }
  in_step_.clear();
  recent_tokens_.emplace_back(Clock::now(), tokens);
  publish_stats(static_cast<int>(plan.batch.size()));
}

void Engine::on_token(Active& a, const GeneratedToken& token) {
  const auto now = Clock::now();
  if (a.n_generated == 0) a.first_token = now;
  a.last_token = now;
  a.n_generated++;

  GenerationEvent event;
  if (a.request.top_logprobs >= 0) {
    event.tokens.push_back(token);
  } else {
    event.tokens.push_back(GeneratedToken{token.id, 0.0f, {}});
  }
  if (!a.request.ignore_eos && text_->is_end_of_generation(token.id)) {
    event.text = a.stop->push(a.text->flush()).text;
    event.text += a.stop->flush();
    finish(a.id, FinishReason::kStop, std::move(event));
    return;
  }
  StopMatcher::Output out = a.stop->push(a.text->push(token.id));
  event.text = std::move(out.text);
  if (out.stopped) {
    event.stop = std::move(out.stop);
    finish(a.id, FinishReason::kStop, std::move(event));
    return;
  }
  if (a.n_generated >= a.max_new) {
    StopMatcher::Output tail = a.stop->push(a.text->flush());
    event.text += tail.text;
    if (!tail.stopped) event.text += a.stop->flush();
    event.stop = std::move(tail.stop);
    finish(a.id, tail.stopped ? FinishReason::kStop : FinishReason::kLength, std::move(event));
    return;
  }
  scheduler_.append_token(a.id, token.id);
  try {
    a.sink(std::move(event));
  } catch (const std::exception& e) {
    GRAFT_LOG_ERROR("request {}: event sink threw: {}", a.request.id, e.what());
  }
}

void Engine::finish(RequestId id, FinishReason reason, GenerationEvent event, std::string error) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  std::unique_ptr<Active> a = std::move(it->second);
  active_.erase(it);
  const bool keep_prefix = reason == FinishReason::kStop || reason == FinishReason::kLength;
  scheduler_.release(id, keep_prefix);

  const auto now = Clock::now();
  event.done = true;
  event.finish_reason = reason;
  event.error = std::move(error);
  event.usage.prompt_tokens = static_cast<int>(a->request.prompt.size());
  event.usage.completion_tokens = a->n_generated;
  event.usage.cached_tokens = a->cached_tokens;
  bool admitted = a->admitted.time_since_epoch().count() != 0;
  event.timings.queued_ms = ms_between(a->submitted, admitted ? a->admitted : now);
  if (a->n_generated > 0) {
    event.timings.ttft_ms = ms_between(a->submitted, a->first_token);
    event.timings.generation_ms = ms_between(a->first_token, a->last_token);
    if (a->n_generated > 1 && event.timings.generation_ms > 0) {
      event.timings.tokens_per_second = (a->n_generated - 1) * 1000.0 / event.timings.generation_ms;
    }
  }
  GRAFT_LOG_INFO(
      "{}: {} prompt tokens ({} cached), {} generated, ttft {:.0f} ms, {:.1f} tok/s, finish {}{}{}",
      a->request.id.empty() ? std::to_string(id) : a->request.id, event.usage.prompt_tokens,
      event.usage.cached_tokens, event.usage.completion_tokens, event.timings.ttft_ms,
      event.timings.tokens_per_second, to_string(reason), event.error.empty() ? "" : ": ", event.error);
  {
    std::lock_guard lock(mutex_);
    count_routes(a->request.adapters, -1);
    switch (reason) {
      case FinishReason::kStop:
      case FinishReason::kLength:
        stats_.requests_finished++;
        break;
      case FinishReason::kCancelled:
        stats_.requests_cancelled++;
        break;
      case FinishReason::kError:
        stats_.requests_failed++;
        break;
    }
    stats_.prompt_tokens += event.usage.prompt_tokens;
    stats_.completion_tokens += event.usage.completion_tokens;
    stats_.cached_prompt_tokens += event.usage.cached_tokens;
  }
  // What the request kept alive (its adapters' lease) is free before its
  // last event is sent, so a client that unloads an adapter right after the
  // answer never finds it still in use.
  a->request.keep_alive.reset();
  try {
    a->sink(std::move(event));
  } catch (const std::exception& e) {
    GRAFT_LOG_ERROR("request {}: event sink threw: {}", a->request.id, e.what());
  }
}

void Engine::fail_requests(const std::vector<RequestId>& ids, const std::string& error) {
  for (RequestId id : ids) finish(id, FinishReason::kError, {}, error);
}

void Engine::recover_from_failed_step(const std::string& error) {
  std::vector<RequestId> ids = std::move(in_step_);
  in_step_.clear();
  // A throw while planning leaves no telling which requests the scheduler
  // had moved: then every request ends.
  if (ids.empty()) {
    for (auto& [id, a] : active_) ids.push_back(id);
  }
  GRAFT_LOG_ERROR("engine step failed ({} requests end with it): {}", ids.size(), error);
  fail_requests(ids, "internal error: " + error);
}

void Engine::publish_stats(int batch_rows, bool count_step) {
  const auto now = Clock::now();
  constexpr auto kWindow = std::chrono::seconds(5);
  while (!recent_tokens_.empty() && now - recent_tokens_.front().first > kWindow) recent_tokens_.pop_front();
  int tokens = 0;
  for (auto& [t, n] : recent_tokens_) tokens += n;
  double span = std::min<double>(std::chrono::duration<double>(now - started_).count(),
                                 std::chrono::duration<double>(kWindow).count());

  std::lock_guard lock(mutex_);
  if (count_step && batch_rows > 0) stats_.steps++;
  stats_.batch_rows = batch_rows;
  stats_.running = scheduler_.n_running();
  stats_.waiting = scheduler_.n_waiting() + static_cast<int>(incoming_.size());
  stats_.pending_rows = scheduler_.pending_prompt_tokens();
  stats_.kv_tokens = scheduler_.running_tokens();
  stats_.kv_bytes = stats_.kv_tokens * limits_.kv_bytes_per_token;
  stats_.kv_reserved_tokens = scheduler_.reserved_tokens();
  stats_.prefix_cache_entries = scheduler_.n_cached();
  stats_.prefix_cache_tokens = scheduler_.cached_tokens();
  stats_.prefix_cache_bytes = stats_.prefix_cache_tokens * limits_.kv_bytes_per_token;
  if (limits_.state_bytes > 0) {
    // Live states of running and cached sequences, and snapshots.
    stats_.state_bytes_per_sequence = limits_.state_bytes;
    stats_.state_snapshots = scheduler_.n_snapshots();
    stats_.state_bytes = (int64_t{scheduler_.n_states()} + scheduler_.n_snapshots()) * limits_.state_bytes;
    stats_.kv_bytes += int64_t{scheduler_.n_running()} * limits_.state_bytes;
    stats_.prefix_cache_bytes += int64_t{scheduler_.n_cached()} * limits_.state_bytes;
  }
  if (limits_.local_cells > 0) {
    // The sliding-window layers' pool: each sequence's window.
    const int64_t running = scheduler_.running_window_cells(), cached = scheduler_.cached_window_cells();
    stats_.kv_window_cells = running + cached;
    stats_.kv_bytes += running * limits_.local_bytes_per_cell;
    stats_.prefix_cache_bytes += cached * limits_.local_bytes_per_cell;
  }
  stats_.tokens_per_second = span > 0 ? tokens / span : 0;
}

}  // namespace graft

#include "server/routes_fit.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "fit/fit.h"
#include "server/router.h"
#include "util/log.h"

namespace graft::server {

namespace {

std::optional<ApiError> read_int(const std::string& key, const std::string& text, int lo, int hi, int& out) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || v < lo || v > hi) {
    return bad_request(fmt::format("'{}' must be a whole number from {} to {}, got '{}'", key, lo, hi, text),
                       key);
  }
  out = int(v);
  return std::nullopt;
}

// The settings a query asks about, starting from the server's own.
std::optional<ApiError> read_settings(const std::map<std::string, std::string>& query,
                                      const fit::FitModel& model, fit::ServeSettings& s) {
  bool budget_given = false;
  for (const auto& [key, value] : query) {
    std::optional<ApiError> error;
    if (key == "ctx") {
      error = read_int(key, value, 1, 1 << 24, s.n_ctx);
    } else if (key == "parallel") {
      error = read_int(key, value, 1, 64, s.parallel);
    } else if (key == "batch") {
      error = read_int(key, value, 8, 8192, s.batch);
    } else if (key == "adapters") {
      error = read_int(key, value, 0, 256, s.adapters);
    } else if (key == "adapter_rank") {
      error = read_int(key, value, 1, 1024, s.adapter_rank);
    } else if (key == "kv_type") {
      auto kv_type = KvCache::type_from_name(value);
      if (kv_type) {
        s.kv_type = *kv_type;
      } else {
        error = bad_request(fmt::format("'kv_type': {}", kv_type.error().message), key);
      }
    } else if (key == "kv_budget") {
      auto budget = parse_kv_budget(value);
      if (!budget) {
        error = bad_request(budget.error().message, key);
      } else {
        const int64_t per_cell = int64_t(KvCache::footprint(model.config(), s.kv_type).bytes_per_cell);
        s.kv_budget_tokens = budget->first > 0 ? budget->first : budget->second / per_cell;
        budget_given = true;
      }
    } else {
      error = bad_request(
          fmt::format("unknown query parameter '{}' (use ctx, parallel, kv_type, kv_budget, batch, "
                      "adapters, adapter_rank)",
                      key),
          key, ApiCode::kUnsupportedParameter);
    }
    if (error) return error;
  }
  // A budget follows the asked context and parallel count unless given.
  if (!budget_given && (query.count("ctx") || query.count("parallel"))) s.kv_budget_tokens = 0;
  s = model.resolve(s);
  if (budget_given && s.kv_budget_tokens < s.n_ctx) {
    return bad_request(fmt::format("'kv_budget' ({} tokens) must hold one full context of {} tokens",
                                   s.kv_budget_tokens, s.n_ctx),
                       "kv_budget");
  }
  return std::nullopt;
}

}  // namespace

struct FitService::Worker {
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::function<void()>> jobs;
  bool stopping = false;
  std::thread thread{[this] { run(); }};

  ~Worker() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
      jobs.clear();
    }
    wake.notify_all();
    thread.join();
  }
  void post(std::function<void()> job) {
    {
      std::lock_guard lock(mutex);
      jobs.push_back(std::move(job));
    }
    wake.notify_one();
  }
  void run() {
    std::unique_lock lock(mutex);
    for (;;) {
      wake.wait(lock, [&] { return stopping || !jobs.empty(); });
      if (stopping) return;
      auto job = std::move(jobs.front());
      jobs.pop_front();
      lock.unlock();
      try {
        job();
      } catch (const std::exception& e) {
        GRAFT_LOG_ERROR("/fit failed: {}", e.what());
      }
      lock.lock();
    }
  }
};

FitService::FitService(std::string model_path, fit::ServeSettings settings, int64_t memory)
    : model_path_(std::move(model_path)),
      settings_(settings),
      memory_(memory),
      worker_(std::make_unique<Worker>()) {}

FitService::~FitService() = default;

void FitService::install(Server& server) {
  FitService* self = this;
  server.router().add("GET", "/fit", [self](HttpRequest& http, std::shared_ptr<Exchange> exchange) {
    self->worker_->post([self, query = parse_query(http.query), exchange] {
      if (!self->model_) {
        auto model = fit::FitModel::open(self->model_path_);
        if (!model) {
          return exchange->send_error(api_error(ApiCode::kInternal, model.error().message));
        }
        self->model_ = std::move(*model);
      }
      fit::ServeSettings settings = self->settings_;
      if (auto error = read_settings(query, *self->model_, settings)) return exchange->send_error(*error);
      auto probe = fit::load_cached_probe(fit::probe_cache_file(), fit::cpu_model(), settings.threads);
      const fit::ProbeResult* p = probe && *probe ? &**probe : nullptr;
      const fit::FitReport report = fit::make_report(
          *self->model_, settings,
          self->memory_ > 0 ? fit::usable_given(self->memory_) : fit::usable_here(fit::process_rss()), p);
      json body = fit::to_json(report);
      if (!probe) body["speed_note"] = probe.error().message;
      exchange->send_json(200, body);
    });
  });
}

}  // namespace graft::server

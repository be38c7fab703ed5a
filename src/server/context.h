// What route handlers share: the served model and the extension hooks other
// parts of graft (adapters) register to read extra request fields and to add
// to /health and /stats.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <vector>

#include "server/http.h"
#include "server/metrics.h"
#include "server/openai_params.h"
#include "server/served_model.h"

namespace graft::server {

// Reads extra fields of a completion or chat request into the engine request
// (e.g. "adapter" → GenerationRequest::adapters). Returns an error (a 400 that
// names the field) to refuse the request.
using RequestHook =
    std::function<std::optional<ApiError>(const RequestJson& body, GenerationRequest& request)>;
// Adds fields to the /health or /stats answer.
using StatusHook = std::function<void(json& body)>;
// Wraps the engine event sink of each completion request (e.g. /metrics
// times its tokens). Called on the HTTP thread; the sink runs on the engine thread.
using SinkHook = std::function<EventSink(EventSink sink)>;
// Adds metric families to the /metrics answer (e.g. adapters, training jobs).
using MetricsHook = std::function<void(PromText& metrics)>;

struct ServerContext {
  explicit ServerContext(ServedModel& m) : model(m) {}
  ServedModel& model;
  std::vector<RequestHook> request_hooks;
  std::vector<StatusHook> health_hooks;
  std::vector<StatusHook> stats_hooks;
  std::vector<SinkHook> sink_hooks;
  std::vector<MetricsHook> metrics_hooks;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
};

// A JSON text for the wire (invalid UTF-8 becomes U+FFFD rather than throwing).
template <typename J>
std::string dump_json(const J& value) {
  return value.dump(-1, ' ', false, J::error_handler_t::replace);
}

}  // namespace graft::server

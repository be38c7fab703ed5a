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
// Runs before the request hooks and may take a while (e.g. loading the adapter
// a request names): it calls `done` exactly once — at once or later, from any
// thread — with an error to refuse the request, or nullopt to go on. `hold`
// (may be null) is kept until the request hooks have run (e.g. a lease that
// keeps what was loaded loaded until the request takes its own).
using PrepareDone = std::function<void(std::optional<ApiError> error, std::shared_ptr<void> hold)>;
using PrepareHook = std::function<void(const RequestJson& body, PrepareDone done)>;
// Adds fields to the /health or /stats answer.
using StatusHook = std::function<void(json& body)>;
// Adds entries to the "data" of /v1/models (e.g. the loaded adapters).
using ModelListHook = std::function<void(RequestJson& data)>;
// Wraps the engine event sink of each completion request (e.g. /metrics
// times its tokens). Called on the HTTP thread; the sink runs on the engine thread.
using SinkHook = std::function<EventSink(EventSink sink)>;
// Adds metric families to the /metrics answer (e.g. adapters, training jobs).
using MetricsHook = std::function<void(PromText& metrics)>;

struct ServerContext {
  explicit ServerContext(ServedModel& m) : model(m) {}
  ServedModel& model;
  PrepareHook prepare;  // may be empty
  std::vector<RequestHook> request_hooks;
  std::vector<std::string> hook_fields;  // the request fields the hooks read
  std::vector<ModelListHook> model_list_hooks;
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

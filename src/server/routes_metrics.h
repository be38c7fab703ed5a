// GET /metrics: the server in Prometheus' text format.
//   graft_http_requests_total{route,method,status}     answers by route pattern
//   graft_prompt_tokens_total, graft_generation_tokens_total
//   graft_requests_total{outcome}                       finished, cancelled, failed
//   graft_time_to_first_token_seconds                   histogram, submit -> first token
//   graft_inter_token_latency_seconds                   histogram, between a request's tokens
//   graft_requests_running, graft_requests_waiting
//   graft_kv_cells_used, graft_kv_cells_reserved, graft_kv_cells_budget, graft_kv_cache_bytes_used
//   graft_prefix_cache_hit_tokens_total, graft_prefix_cache_entries, graft_prefix_cache_tokens
//   process_resident_memory_bytes, graft_process_resident_memory_peak_bytes
// Other parts add theirs through Server::add_metrics_hook: adapters
// (routes_adapters.h) and training jobs (write_training_jobs below).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "server/server.h"

namespace graft::server {

// Adds the route, counts every answer by route and status (the router's
// observer), and times each completion's tokens (a sink hook).
void install_metrics(Server& server);

// graft_training_jobs{state="queued|running|succeeded|..."}: for the job
// store's metrics hook.
void write_training_jobs(PromText& metrics, const std::map<std::string, int64_t>& jobs_by_state);

}  // namespace graft::server

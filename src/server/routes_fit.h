// GET /fit: graft fit's answers for the served model (the same JSON as
// `graft fit --json`). Query parameters change the settings asked about:
// ctx, parallel, kv_type (f16, q8_0, q4_0), kv_budget (tokens or a size like
// 2GiB), batch, adapters, adapter_rank; any other is a 400. The memory this
// server holds counts as usable, as if it restarted with those settings.
// Speeds come from the probe cached by `graft fit --probe` (null before).
#pragma once

#include <memory>
#include <string>

#include "fit/memory.h"
#include "server/server.h"

namespace graft::server {

class FitService {
 public:
  // model_path: the served file; settings: what the server runs with
  // (resolved). The file's layout is read at the first request, so a server
  // that is never asked holds no second copy of its metadata.
  // memory: the --memory the server plans with (0: what is free).
  FitService(std::string model_path, fit::ServeSettings settings, int64_t memory = 0);
  // Stops after the answer in progress (destroy it after the HTTP server stopped).
  ~FitService();
  FitService(const FitService&) = delete;
  FitService& operator=(const FitService&) = delete;

  void install(Server& server);

 private:
  struct Worker;
  std::string model_path_;
  std::unique_ptr<fit::FitModel> model_;  // worker thread only
  fit::ServeSettings settings_;
  int64_t memory_ = 0;
  std::unique_ptr<Worker> worker_;  // answers are computed here, off the HTTP threads
};

}  // namespace graft::server

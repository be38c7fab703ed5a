// Server: graft's OpenAI-compatible HTTP API over one ServedModel.
//
//   POST /v1/chat/completions   POST /v1/completions   GET /v1/models
//   GET  /health                GET  /stats
//   POST /v1/messages (Anthropic)   POST /v1/responses (OpenAI Responses)
//
// Other parts of graft extend it before start(): router().add(...) for new
// routes (e.g. /v1/adapters), add_request_hook() to read extra request fields
// (e.g. "adapter"), add_health_hook()/add_stats_hook() to report more.
#pragma once

#include <memory>
#include <string>

#include "server/context.h"
#include "server/http_server.h"
#include "server/router.h"
#include "server/served_model.h"

namespace graft::server {

struct ServerOptions {
  HttpServerOptions http;
  std::string api_key;  // "": no key needed
};

class Server {
 public:
  Server(ServedModel& model, ServerOptions options);
  ~Server();

  Router& router() { return *router_; }
  ServerContext& context() { return context_; }
  // `fields`: the request fields the hook reads (so that they do not count as unknown).
  void add_request_hook(RequestHook hook, std::vector<std::string> fields = {}) {
    context_.request_hooks.push_back(std::move(hook));
    for (auto& f : fields) context_.hook_fields.push_back(std::move(f));
  }
  void set_prepare_hook(PrepareHook hook) { context_.prepare = std::move(hook); }
  void add_model_list_hook(ModelListHook hook) { context_.model_list_hooks.push_back(std::move(hook)); }
  void add_health_hook(StatusHook hook) { context_.health_hooks.push_back(std::move(hook)); }
  void add_stats_hook(StatusHook hook) { context_.stats_hooks.push_back(std::move(hook)); }
  void add_metrics_hook(MetricsHook hook) { context_.metrics_hooks.push_back(std::move(hook)); }

  Status start();
  int port() const { return http_ ? http_->port() : 0; }
  // Blocks until SIGINT/SIGTERM (or stop()).
  void wait();
  void stop();

 private:
  ServerOptions options_;
  ServerContext context_;
  std::shared_ptr<Router> router_;
  std::unique_ptr<HttpServer> http_;
};

// The routes above, on a router (Server does this itself).
void add_openai_routes(Router& router, ServerContext& context);

}  // namespace graft::server

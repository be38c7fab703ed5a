// The OpenAI-compatible routes: JSON in, engine request out; engine events
// back to JSON/SSE in completion_job.cpp.
#include <chrono>

#include <fmt/format.h>

#include "server/chat_run.h"
#include "server/completion_job.h"
#include "server/openai_fields.h"
#include "server/routes_apis.h"
#include "server/server.h"
#include "server/static_web.h"
#include "util/log.h"

namespace graft::server {

namespace {

double uptime_seconds(const ServerContext& context) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - context.started).count();
}

// Shared by both generation routes: validate, run the hooks.
bool read_request(ServerContext& context, const std::string& route, ApiKind kind, const RequestJson& body,
                  OpenAiRequest& request, Exchange& exchange) {
  const int n_vocab = context.model.tokenizer()->n_vocab();
  request.generation.sampling = context.model.sampling_defaults().options;
  std::optional<ApiError> error = read_openai_request(body, kind, n_vocab, request);
  if (!error) error = check_model_name(context, body);
  for (size_t i = 0; !error && i < context.request_hooks.size(); ++i) {
    error = context.request_hooks[i](body, request.generation);
  }
  if (error) {
    exchange.send_error(*error);
    return false;
  }
  for (const std::string& field : unknown_fields(body, kind, context.hook_fields)) {
    GRAFT_LOG_DEBUG("POST {}: ignoring the unknown field '{}'", route, field);
  }
  return true;
}

// Parses the body, runs the prepare hook (which may wait, e.g. for an
// adapter to load), then `next` with the body on the exchange's strand.
void read_body_then(ServerContext& context, const HttpRequest& http,
                    const std::shared_ptr<Exchange>& exchange,
                    std::function<void(const RequestJson& body)> next) {
  auto body = std::make_shared<RequestJson>();
  if (auto error = parse_body(http.body, *body)) return exchange->send_error(*error);
  when_prepared(context, *body, exchange, [body, exchange, next](std::optional<ApiError> error) {
    if (error) return exchange->send_error(*error);
    next(*body);
  });
}

void completions(ServerContext& context, HttpRequest& http, std::shared_ptr<Exchange> exchange) {
  read_body_then(context, http, exchange, [&context, exchange, route = http.path](const RequestJson& body) {
    OpenAiRequest request;
    if (!read_request(context, route, ApiKind::kCompletions, body, request, *exchange)) return;
    const Tokenizer& tok = *context.model.tokenizer();
    std::string text;
    if (request.prompt_is_tokens) {
      request.generation.prompt = request.prompt_tokens;
      text = tok.decode(request.prompt_tokens);
    } else {
      auto tokens = tok.encode(request.prompt_text, /*add_special=*/true, /*parse_special=*/true);
      if (!tokens) return exchange->send_error(bad_request(tokens.error().message, "prompt"));
      request.generation.prompt = std::move(*tokens);
      text = request.prompt_text;
    }
    start_completion(context, std::move(request), std::move(text), exchange);
  });
}

void chat_completions(ServerContext& context, HttpRequest& http, std::shared_ptr<Exchange> exchange) {
  read_body_then(context, http, exchange, [&context, exchange, route = http.path](const RequestJson& body) {
    OpenAiRequest request;
    if (!read_request(context, route, ApiKind::kChat, body, request, *exchange)) return;
    std::string prompt;
    if (auto error = render_chat_prompt(context.model, request, prompt)) return exchange->send_error(*error);
    start_completion(context, std::move(request), std::move(prompt), exchange);
  });
}

RequestJson model_json(const ServerContext& context, const std::string& name) {
  const ServedModel& m = context.model;
  const Engine& engine = m.engine();
  return RequestJson{{"id", name},
                     {"object", "model"},
                     {"created", m.created()},
                     {"owned_by", "graft"},
                     {"root", m.id()},
                     {"parent", nullptr},
                     {"meta",
                      {{"n_ctx", engine.config().n_ctx},
                       {"n_vocab", m.tokenizer()->n_vocab()},
                       {"parallel", engine.config().max_running},
                       {"chat_template", m.has_own_chat_template() ? "model" : "chatml"},
                       {"sampling", m.sampling_defaults().to_json()}}}};
}

// The served model under its id and each alias, then what the hooks add
// (the loaded adapters, each with "parent": the model's id).
RequestJson model_list(const ServerContext& context) {
  RequestJson data = RequestJson::array({model_json(context, context.model.id())});
  for (const std::string& alias : context.model.aliases()) data.push_back(model_json(context, alias));
  for (const auto& hook : context.model_list_hooks) hook(data);
  return data;
}

void models(ServerContext& context, HttpRequest&, std::shared_ptr<Exchange> exchange) {
  RequestJson body = {{"object", "list"}, {"data", model_list(context)}};
  exchange->send(HttpResponse{200, "application/json", dump_json(body), {}});
}

void one_model(ServerContext& context, HttpRequest& http, std::shared_ptr<Exchange> exchange) {
  const std::string& id = http.params["id"];
  for (const RequestJson& m : model_list(context)) {
    if (m["id"] == id) return exchange->send(HttpResponse{200, "application/json", dump_json(m), {}});
  }
  exchange->send_error(
      api_error(ApiCode::kModelNotFound,
                fmt::format("no model '{}': this server serves '{}' (GET /v1/models lists every name)", id,
                            context.model.id()),
                "model"));
}

void health(ServerContext& context, HttpRequest&, std::shared_ptr<Exchange> exchange) {
  EngineStats stats = context.model.engine().stats();
  json body = {{"status", "ok"},
               {"model", context.model.id()},
               {"version", GRAFT_VERSION},
               {"uptime_s", uptime_seconds(context)},
               {"requests_running", stats.running},
               {"requests_waiting", stats.waiting}};
  for (const auto& hook : context.health_hooks) hook(body);
  exchange->send_json(200, body);
}

void stats(ServerContext& context, HttpRequest&, std::shared_ptr<Exchange> exchange) {
  EngineStats s = context.model.engine().stats();
  json body = {{"model", context.model.id()},
               {"version", GRAFT_VERSION},
               {"uptime_s", uptime_seconds(context)},
               {"requests",
                {{"submitted", s.requests_submitted},
                 {"served", s.requests_finished},
                 {"cancelled", s.requests_cancelled},
                 {"failed", s.requests_failed},
                 {"running", s.running},
                 {"waiting", s.waiting}}},
               {"tokens",
                {{"prompt", s.prompt_tokens},
                 {"completion", s.completion_tokens},
                 {"cached_prompt", s.cached_prompt_tokens}}},
               {"tokens_per_second", s.tokens_per_second},
               {"batch",
                {{"rows", s.batch_rows},
                 {"pending_rows", s.pending_rows},
                 {"steps", s.steps},
                 {"kv_type", context.model.kv_type()},
                 {"kv_tokens", s.kv_tokens},
                 {"kv_bytes", s.kv_bytes},
                 {"kv_reserved_tokens", s.kv_reserved_tokens},
                 {"kv_budget_tokens", s.kv_budget_tokens},
                 {"kv_budget_bytes", s.kv_budget_bytes},
                 {"state_bytes", s.state_bytes},
                 {"state_bytes_per_sequence", s.state_bytes_per_sequence},
                 {"state_snapshots", s.state_snapshots},
                 {"kv_window_cells", s.kv_window_cells},
                 {"kv_window_cells_total", s.kv_window_cells_total}}},
               {"prefix_cache",
                {{"entries", s.prefix_cache_entries},
                 {"tokens", s.prefix_cache_tokens},
                 {"bytes", s.prefix_cache_bytes},
                 {"hit_tokens", s.cached_prompt_tokens}}}};
  for (const auto& hook : context.stats_hooks) hook(body);
  exchange->send_json(200, body);
}

}  // namespace

void add_openai_routes(Router& router, ServerContext& context) {
  ServerContext* c = &context;
  auto bind = [c](void (*fn)(ServerContext&, HttpRequest&, std::shared_ptr<Exchange>)) {
    return [c, fn](HttpRequest& request, std::shared_ptr<Exchange> exchange) {
      fn(*c, request, std::move(exchange));
    };
  };
  for (const char* prefix : {"/v1", ""}) {
    std::string p = prefix;
    router.add("POST", p + "/chat/completions", bind(chat_completions));
    router.add("POST", p + "/completions", bind(completions));
    router.add("GET", p + "/models", bind(models));
    router.add("GET", p + "/models/{id}", bind(one_model));
  }
  router.add("GET", "/health", bind(health), RouteOptions{.public_route = true});
  router.add("GET", "/stats", bind(stats));
}

Server::Server(ServedModel& model, ServerOptions options)
    : options_(std::move(options)), context_(model), router_(std::make_shared<Router>()) {
  router_->set_api_key(options_.api_key);
  add_openai_routes(*router_, context_);
  add_anthropic_routes(*router_, context_);
  add_responses_routes(*router_, context_);
  add_web_routes(*router_);
}

Server::~Server() {
  stop();
}

Status Server::start() {
  http_ = std::make_unique<HttpServer>(options_.http, router_);
  return http_->start();
}

void Server::wait() {
  if (!http_) return;
  http_->stop_on_signals();
  http_->wait();
}

void Server::stop() {
  if (http_) http_->stop();
}

}  // namespace graft::server

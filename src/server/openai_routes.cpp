// The OpenAI-compatible routes: JSON in, engine request out; engine events
// back to JSON/SSE in completion_job.cpp.
#include <chrono>

#include <fmt/format.h>

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

// Shared by both generation routes: parse, validate, run the hooks.
bool read_request(ServerContext& context, const HttpRequest& http, ApiKind kind, RequestJson& body,
                  OpenAiRequest& request, Exchange& exchange) {
  if (auto error = parse_body(http.body, body)) {
    exchange.send_error(*error);
    return false;
  }
  const int n_vocab = context.model.tokenizer()->n_vocab();
  request.generation.sampling = context.model.sampling_defaults().options;
  if (auto error = read_openai_request(body, kind, n_vocab, request)) {
    exchange.send_error(*error);
    return false;
  }
  for (const auto& hook : context.request_hooks) {
    if (auto error = hook(body, request.generation)) {
      exchange.send_error(*error);
      return false;
    }
  }
  for (const std::string& field : unknown_fields(body, kind, context.hook_fields)) {
    GRAFT_LOG_DEBUG("{} {}: ignoring the unknown field '{}'", http.method, http.path, field);
  }
  return true;
}

void completions(ServerContext& context, HttpRequest& http, std::shared_ptr<Exchange> exchange) {
  RequestJson body;
  OpenAiRequest request;
  if (!read_request(context, http, ApiKind::kCompletions, body, request, *exchange)) return;
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
}

void chat_completions(ServerContext& context, HttpRequest& http, std::shared_ptr<Exchange> exchange) {
  RequestJson body;
  OpenAiRequest request;
  if (!read_request(context, http, ApiKind::kChat, body, request, *exchange)) return;
  ServedModel& model = context.model;
  ChatRenderOptions options;
  options.add_generation_prompt = true;
  options.bos_token = model.bos_text();
  options.eos_token = model.eos_text();
  options.extra_kwargs = request.template_kwargs;
  auto prompt = model.chat_template().render(request.messages, request.tools, options);
  if (!prompt) {
    return exchange->send_error(bad_request(
        "cannot format the conversation with the model's chat template: " + prompt.error().message,
        "messages", ApiCode::kTemplateError));
  }
  const Tokenizer& tok = *model.tokenizer();
  auto tokens = tok.encode(*prompt, /*add_special=*/false, /*parse_special=*/true);
  if (!tokens) return exchange->send_error(bad_request(tokens.error().message, "messages"));
  if (tok.add_bos() && tok.bos() >= 0 && (tokens->empty() || tokens->front() != tok.bos())) {
    tokens->insert(tokens->begin(), tok.bos());
  }
  request.generation.prompt = std::move(*tokens);
  start_completion(context, std::move(request), std::move(*prompt), exchange);
}

RequestJson model_json(const ServerContext& context) {
  const ServedModel& m = context.model;
  const Engine& engine = m.engine();
  return RequestJson{{"id", m.id()},
                     {"object", "model"},
                     {"created", m.created()},
                     {"owned_by", "graft"},
                     {"meta",
                      {{"n_ctx", engine.config().n_ctx},
                       {"n_vocab", m.tokenizer()->n_vocab()},
                       {"parallel", engine.config().max_running},
                       {"chat_template", m.has_own_chat_template() ? "model" : "chatml"},
                       {"sampling", m.sampling_defaults().to_json()}}}};
}

void models(ServerContext& context, HttpRequest&, std::shared_ptr<Exchange> exchange) {
  RequestJson body = {{"object", "list"}, {"data", RequestJson::array({model_json(context)})}};
  exchange->send(HttpResponse{200, "application/json", dump_json(body), {}});
}

void one_model(ServerContext& context, HttpRequest& http, std::shared_ptr<Exchange> exchange) {
  if (http.params["id"] != context.model.id()) {
    return exchange->send_error(api_error(
        ApiCode::kModelNotFound,
        fmt::format("no model '{}': this server serves '{}'", http.params["id"], context.model.id()),
        "model"));
  }
  exchange->send(HttpResponse{200, "application/json", dump_json(model_json(context)), {}});
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
                 {"kv_tokens", s.kv_tokens},
                 {"kv_bytes", s.kv_bytes},
                 {"kv_reserved_tokens", s.kv_reserved_tokens},
                 {"kv_budget_tokens", s.kv_budget_tokens},
                 {"kv_budget_bytes", s.kv_budget_bytes},
                 {"state_bytes", s.state_bytes},
                 {"state_bytes_per_sequence", s.state_bytes_per_sequence},
                 {"state_snapshots", s.state_snapshots}}},
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

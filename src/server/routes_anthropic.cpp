// Anthropic's Messages API: POST /v1/messages (whole or streamed with
// Anthropic's events) and POST /v1/messages/count_tokens. Requests are
// translated into graft's chat request (api_translation.h) and run by the same
// pipeline as /v1/chat/completions (chat_run.h).
#include <fmt/format.h>

#include "server/api_translation.h"
#include "server/chat_run.h"
#include "server/routes_apis.h"

namespace graft::server {

namespace {

void send_anthropic_error(Exchange& exchange, const ApiError& error) {
  exchange.send(HttpResponse{error.status(), "application/json", dump_json(anthropic_error_json(error)), {}});
}

RequestJson stop_sequence(const ChatResult& result) {
  return result.stop.empty() ? RequestJson(nullptr) : RequestJson(result.stop);
}

class AnthropicWriter : public ChatWriter {
 public:
  AnthropicWriter(std::shared_ptr<Exchange> exchange, std::string model, bool stream)
      : exchange_(std::move(exchange)),
        model_(std::move(model)),
        stream_(stream),
        id_(random_api_id("msg_")) {}

  void begin(int prompt_tokens) override {
    if (!stream_) return;
    started_ = true;
    exchange_->start_events();
    RequestJson message = head();
    message["content"] = RequestJson::array();
    message["stop_reason"] = nullptr;
    message["stop_sequence"] = nullptr;
    message["usage"] = {{"input_tokens", prompt_tokens}, {"output_tokens", 0}};
    event("message_start", {{"type", "message_start"}, {"message", message}});
  }

  void delta(const RequestJson& d) override {
    if (!stream_) return;
    if (d.contains("reasoning_content")) {
      open("thinking", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
      send_delta({{"type", "thinking_delta"}, {"thinking", d["reasoning_content"]}});
    }
    if (d.contains("content")) {
      open("text", {{"type", "text"}, {"text", ""}});
      send_delta({{"type", "text_delta"}, {"text", d["content"]}});
    }
    if (d.contains("tool_calls")) {
      for (const RequestJson& call : d["tool_calls"]) {
        close();
        open("tool_use", {{"type", "tool_use"},
                          {"id", call["id"]},
                          {"name", call["function"]["name"]},
                          {"input", RequestJson::object()}});
        send_delta({{"type", "input_json_delta"}, {"partial_json", call["function"]["arguments"]}});
        close();
      }
    }
  }

  void done(const ChatResult& result) override {
    const std::string stop = anthropic_stop_reason(result.finish_reason, result.tool_calls, result.stop);
    if (!stream_) {
      RequestJson body = head();
      body["content"] = anthropic_content(result.message);
      body["stop_reason"] = stop;
      body["stop_sequence"] = stop_sequence(result);
      body["usage"] = {{"input_tokens", result.usage.prompt_tokens},
                       {"output_tokens", result.usage.completion_tokens},
                       {"cache_read_input_tokens", result.usage.cached_tokens}};
      exchange_->send(HttpResponse{200, "application/json", dump_json(body), {}});
      return;
    }
    if (index_ < 0 && !result.tool_calls) {
      // An empty reply still has one (empty) text block.
      open("text", {{"type", "text"}, {"text", ""}});
    }
    close();
    event("message_delta", {{"type", "message_delta"},
                            {"delta", {{"stop_reason", stop}, {"stop_sequence", stop_sequence(result)}}},
                            {"usage",
                             {{"input_tokens", result.usage.prompt_tokens},
                              {"output_tokens", result.usage.completion_tokens},
                              {"cache_read_input_tokens", result.usage.cached_tokens}}}});
    event("message_stop", {{"type", "message_stop"}});
    exchange_->end_events();
  }

  void fail(const ApiError& error) override {
    if (!started_) return send_anthropic_error(*exchange_, error);
    exchange_->send_named_event("error", dump_json(anthropic_error_json(error)));
    exchange_->end_events();
  }

 private:
  RequestJson head() const {
    return RequestJson{{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", model_}};
  }
  void event(const std::string& type, const RequestJson& data) {
    exchange_->send_named_event(type, dump_json(data));
  }
  void open(const std::string& kind, const RequestJson& block) {
    if (open_ == kind && kind != "tool_use") return;
    close();
    ++index_;
    open_ = kind;
    event("content_block_start",
          {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}});
  }
  void send_delta(const RequestJson& d) {
    event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", d}});
  }
  void close() {
    if (open_.empty()) return;
    event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
    open_.clear();
  }

  std::shared_ptr<Exchange> exchange_;
  std::string model_;
  bool stream_;
  std::string id_;
  bool started_ = false;
  int index_ = -1;    // the last block's index
  std::string open_;  // the open block's kind, "" when none is
};

// Parses and translates the body, runs the prepare hook (which may wait, e.g.
// for an adapter to load), then reads it as a chat request and renders its
// prompt; `next` gets the request on the exchange's strand. Errors are
// answered in Anthropic's shape.
void read_anthropic(ServerContext& context, HttpRequest& http, AnthropicKind kind,
                    const std::shared_ptr<Exchange>& exchange,
                    std::function<void(OpenAiRequest& request, const std::string& prompt)> next) {
  RequestJson body;
  auto chat = std::make_shared<RequestJson>();
  std::optional<ApiError> error = parse_body(http.body, body);
  if (!error) error = anthropic_to_chat(body, kind, context.hook_fields, *chat);
  if (error) return send_anthropic_error(*exchange, *error);
  when_prepared(context, *chat, exchange, [&context, chat, exchange, next](std::optional<ApiError> error) {
    OpenAiRequest request;
    std::string prompt;
    if (!error) error = prepare_chat(context, *chat, request, prompt);
    if (error) return send_anthropic_error(*exchange, *error);
    next(request, prompt);
  });
}

void messages(ServerContext& context, HttpRequest& http, std::shared_ptr<Exchange> exchange) {
  read_anthropic(context, http, AnthropicKind::kMessages, exchange,
                 [&context, exchange](OpenAiRequest& request, const std::string& prompt) {
                   auto writer = std::make_shared<AnthropicWriter>(exchange, request.model, request.stream);
                   start_chat_run(context, std::move(request), prompt, exchange, writer);
                 });
}

void count_tokens(ServerContext& context, HttpRequest& http, std::shared_ptr<Exchange> exchange) {
  read_anthropic(context, http, AnthropicKind::kCountTokens, exchange,
                 [exchange](OpenAiRequest& request, const std::string&) {
                   exchange->send_json(200, json{{"input_tokens", request.generation.prompt.size()}});
                 });
}

}  // namespace

void add_anthropic_routes(Router& router, ServerContext& context) {
  ServerContext* c = &context;
  router.add("POST", "/v1/messages", [c](HttpRequest& request, std::shared_ptr<Exchange> exchange) {
    messages(*c, request, exchange);
  });
  router.add(
      "POST", "/v1/messages/count_tokens",
      [c](HttpRequest& request, std::shared_ptr<Exchange> exchange) { count_tokens(*c, request, exchange); });
}

}  // namespace graft::server

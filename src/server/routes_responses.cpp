// OpenAI's Responses API: POST /v1/responses (whole or streamed with its
// typed events), GET and DELETE /v1/responses/{id}. Requests are translated
// into graft's chat request (api_translation.h) and run by the same pipeline
// as /v1/chat/completions (chat_run.h). Stored responses live in memory, the
// 256 most recently used, for GET and for previous_response_id.
#include <chrono>
#include <cmath>
#include <tuple>

#include <fmt/format.h>

#include "server/api_translation.h"
#include "server/chat_run.h"
#include "server/response_store.h"
#include "server/routes_apis.h"

namespace graft::server {

namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A float setting as the decimal it was given as (0.8, not 0.800000011920929).
double rounded(float x) {
  return std::round(static_cast<double>(x) * 1e6) / 1e6;
}

class ResponsesWriter : public ChatWriter {
 public:
  using OnDone = std::function<void(const RequestJson& response, const RequestJson& message)>;

  // response: the response object without status, output and usage.
  ResponsesWriter(std::shared_ptr<Exchange> exchange, RequestJson response, bool stream, OnDone on_done)
      : exchange_(std::move(exchange)),
        response_(std::move(response)),
        stream_(stream),
        on_done_(std::move(on_done)),
        seed_(response_["id"].get<std::string>().substr(5)) {}

  void begin(int) override {
    if (!stream_) return;
    started_ = true;
    exchange_->start_events();
    RequestJson r = snapshot("in_progress", RequestJson::array(), nullptr);
    event("response.created", {{"response", r}});
    event("response.in_progress", {{"response", r}});
  }

  void delta(const RequestJson& d) override {
    if (!stream_) return;
    if (d.contains("reasoning_content")) {
      if (open_ != "reasoning") {
        close();
        open_ = "reasoning";
        item_ = {{"type", "reasoning"},
                 {"id", fmt::format("rs_{}_{}", seed_, output_.size())},
                 {"summary", RequestJson::array()},
                 {"content", RequestJson::array()}};
        event("response.output_item.added", {{"output_index", output_.size()}, {"item", item_}});
        text_.clear();
      }
      const std::string piece = d["reasoning_content"];
      text_ += piece;
      event("response.reasoning_text.delta", {{"item_id", item_["id"]},
                                              {"output_index", output_.size()},
                                              {"content_index", 0},
                                              {"delta", piece}});
    }
    if (d.contains("content")) {
      if (open_ != "message") {
        close();
        open_ = "message";
        item_ = {{"type", "message"},
                 {"id", fmt::format("msg_{}_{}", seed_, output_.size())},
                 {"status", "in_progress"},
                 {"role", "assistant"},
                 {"content", RequestJson::array()}};
        event("response.output_item.added", {{"output_index", output_.size()}, {"item", item_}});
        event("response.content_part.added", {{"item_id", item_["id"]},
                                              {"output_index", output_.size()},
                                              {"content_index", 0},
                                              {"part", text_part("")}});
        text_.clear();
      }
      const std::string piece = d["content"];
      text_ += piece;
      event("response.output_text.delta", {{"item_id", item_["id"]},
                                           {"output_index", output_.size()},
                                           {"content_index", 0},
                                           {"delta", piece},
                                           {"logprobs", RequestJson::array()}});
    }
    if (d.contains("tool_calls")) {
      for (const RequestJson& call : d["tool_calls"]) {
        close();
        RequestJson item = {{"type", "function_call"}, {"id", fmt::format("fc_{}_{}", seed_, output_.size())},
                            {"call_id", call["id"]},   {"name", call["function"]["name"]},
                            {"arguments", ""},         {"status", "in_progress"}};
        const size_t index = output_.size();
        event("response.output_item.added", {{"output_index", index}, {"item", item}});
        const RequestJson& args = call["function"]["arguments"];
        event("response.function_call_arguments.delta",
              {{"item_id", item["id"]}, {"output_index", index}, {"delta", args}});
        event(
            "response.function_call_arguments.done",
            {{"item_id", item["id"]}, {"output_index", index}, {"name", item["name"]}, {"arguments", args}});
        item["arguments"] = args;
        item["status"] = "completed";
        event("response.output_item.done", {{"output_index", index}, {"item", item}});
        output_.push_back(item);
      }
    }
  }

  void done(const ChatResult& result) override {
    const bool incomplete = result.finish_reason == FinishReason::kLength;
    RequestJson output;
    if (stream_) {
      close();
      output = output_;
    } else {
      output = responses_output(result.message, seed_);
    }
    RequestJson r = snapshot(incomplete ? "incomplete" : "completed", output, responses_usage(result.usage));
    if (incomplete) r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    if (on_done_) on_done_(r, result.message);
    if (!stream_) {
      exchange_->send(HttpResponse{200, "application/json", dump_json(r), {}});
      return;
    }
    event(incomplete ? "response.incomplete" : "response.completed", {{"response", r}});
    exchange_->end_events();
  }

  void fail(const ApiError& error) override {
    if (!started_) return exchange_->send_error(error);
    event("error", {{"code", code_name(error.code)},
                    {"message", error.message},
                    {"param", error.param.empty() ? RequestJson(nullptr) : RequestJson(error.param)}});
    exchange_->end_events();
  }

 private:
  static RequestJson text_part(const std::string& text) {
    return {{"type", "output_text"},
            {"text", text},
            {"annotations", RequestJson::array()},
            {"logprobs", RequestJson::array()}};
  }

  RequestJson snapshot(const char* status, RequestJson output, RequestJson usage) const {
    RequestJson r = response_;
    r["status"] = status;
    r["output"] = std::move(output);
    r["usage"] = std::move(usage);
    return r;
  }

  void event(const std::string& type, RequestJson data) {
    RequestJson e = {{"type", type}, {"sequence_number", sequence_++}};
    for (auto& [k, v] : data.items()) e[k] = v;
    exchange_->send_named_event(type, dump_json(e));
  }

  // Ends the open reasoning or message item.
  void close() {
    const size_t index = output_.size();
    if (open_ == "reasoning") {
      event("response.reasoning_text.done",
            {{"item_id", item_["id"]}, {"output_index", index}, {"content_index", 0}, {"text", text_}});
      item_["content"] = RequestJson::array({{{"type", "reasoning_text"}, {"text", text_}}});
    } else if (open_ == "message") {
      event("response.output_text.done", {{"item_id", item_["id"]},
                                          {"output_index", index},
                                          {"content_index", 0},
                                          {"text", text_},
                                          {"logprobs", RequestJson::array()}});
      event("response.content_part.done", {{"item_id", item_["id"]},
                                           {"output_index", index},
                                           {"content_index", 0},
                                           {"part", text_part(text_)}});
      item_["content"] = RequestJson::array({text_part(text_)});
      item_["status"] = "completed";
    } else {
      return;
    }
    event("response.output_item.done", {{"output_index", index}, {"item", item_}});
    output_.push_back(item_);
    open_.clear();
  }

  std::shared_ptr<Exchange> exchange_;
  RequestJson response_;
  bool stream_;
  OnDone on_done_;
  std::string seed_;
  bool started_ = false;
  int64_t sequence_ = 0;
  RequestJson output_ = RequestJson::array();  // the finished items
  std::string open_;                           // "reasoning", "message" or "" (none open)
  RequestJson item_;                           // the open item
  std::string text_;                           // the open item's text so far
};

void respond(ServerContext& context, const std::shared_ptr<ResponseStore>& store,
             const std::shared_ptr<Exchange>& exchange, const RequestJson& body, const RequestJson& history,
             const RequestJson& input, const RequestJson& chat, const std::string& previous);

void create(ServerContext& context, const std::shared_ptr<ResponseStore>& store, HttpRequest& http,
            std::shared_ptr<Exchange> exchange) {
  RequestJson body;
  if (auto error = parse_body(http.body, body)) return exchange->send_error(*error);
  RequestJson history = RequestJson::array();
  std::string previous;
  if (auto it = body.find("previous_response_id"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) {
      return exchange->send_error(bad_request("'previous_response_id' must be a string",
                                              "previous_response_id", ApiCode::kInvalidType));
    }
    previous = it->get<std::string>();
    auto stored = store->get(previous);
    if (!stored) {
      return exchange->send_error(
          bad_request(fmt::format("no stored response '{}' (graft keeps the {} most recent "
                                  "responses stored, in memory)",
                                  previous, store->capacity()),
                      "previous_response_id", ApiCode::kNotFound));
    }
    history = stored->conversation;
  }
  RequestJson chat;
  if (auto error = responses_to_chat(body, history, context.hook_fields, chat))
    return exchange->send_error(*error);
  RequestJson input;
  if (auto error = responses_input_messages(body["input"], input)) return exchange->send_error(*error);
  // The prepare hook may wait (e.g. for an adapter to load): the rest runs after it.
  auto parts = std::make_shared<std::tuple<RequestJson, RequestJson, RequestJson>>(
      std::move(body), std::move(history), std::move(input));
  auto shared_chat = std::make_shared<RequestJson>(std::move(chat));
  when_prepared(context, *shared_chat, exchange,
                [&context, store, exchange, parts, shared_chat, previous](std::optional<ApiError> error) {
                  if (error) return exchange->send_error(*error);
                  auto& [body, history, input] = *parts;
                  respond(context, store, exchange, body, history, input, *shared_chat, previous);
                });
}

void respond(ServerContext& context, const std::shared_ptr<ResponseStore>& store,
             const std::shared_ptr<Exchange>& exchange, const RequestJson& body, const RequestJson& history,
             const RequestJson& input, const RequestJson& chat, const std::string& previous) {
  OpenAiRequest request;
  std::string prompt;
  if (auto error = prepare_chat(context, chat, request, prompt)) return exchange->send_error(*error);

  auto value = [&](const char* name, RequestJson fallback) {
    auto it = body.find(name);
    return it == body.end() || it->is_null() ? fallback : *it;
  };
  const bool store_it = value("store", true).get<bool>();
  RequestJson response = {
      {"id", random_api_id("resp_")},
      {"object", "response"},
      {"created_at", unix_now()},
      {"status", "in_progress"},
      {"error", nullptr},
      {"incomplete_details", nullptr},
      {"instructions", value("instructions", nullptr)},
      {"max_output_tokens", value("max_output_tokens", nullptr)},
      {"model", request.model.empty() ? context.model.id() : request.model},
      {"output", RequestJson::array()},
      {"parallel_tool_calls", true},
      {"previous_response_id", previous.empty() ? RequestJson(nullptr) : RequestJson(previous)},
      {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
      {"store", store_it},
      {"temperature", rounded(request.generation.sampling.temperature)},
      {"text", {{"format", {{"type", "text"}}}}},
      {"tool_choice", value("tool_choice", "auto")},
      {"tools", value("tools", RequestJson::array())},
      {"top_p", rounded(request.generation.sampling.top_p)},
      {"truncation", "disabled"},
      {"usage", nullptr},
      {"user", value("user", nullptr)},
      {"metadata", value("metadata", RequestJson::object())},
  };
  ResponsesWriter::OnDone on_done;
  if (store_it) {
    RequestJson conversation = history;
    for (const auto& m : input) conversation.push_back(m);
    on_done = [store, conversation = std::move(conversation)](const RequestJson& r,
                                                              const RequestJson& message) {
      RequestJson c = conversation;
      RequestJson m = message;
      if (m["content"].is_null()) m["content"] = "";
      c.push_back(std::move(m));
      store->put(r["id"].get<std::string>(), StoredResponse{r, std::move(c)});
    };
  }
  auto writer =
      std::make_shared<ResponsesWriter>(exchange, std::move(response), request.stream, std::move(on_done));
  start_chat_run(context, std::move(request), prompt, exchange, writer);
}

ApiError not_stored(const std::string& id) {
  return api_error(ApiCode::kNotFound, fmt::format("no stored response '{}'", id), "response_id");
}

}  // namespace

void add_responses_routes(Router& router, ServerContext& context) {
  ServerContext* c = &context;
  auto store = std::make_shared<ResponseStore>(256);
  router.add("POST", "/v1/responses", [c, store](HttpRequest& request, std::shared_ptr<Exchange> exchange) {
    create(*c, store, request, std::move(exchange));
  });
  router.add("GET", "/v1/responses/{id}", [store](HttpRequest& request, std::shared_ptr<Exchange> exchange) {
    const std::string& id = request.params["id"];
    auto stored = store->get(id);
    if (!stored) return exchange->send_error(not_stored(id));
    exchange->send(HttpResponse{200, "application/json", dump_json(stored->response), {}});
  });
  router.add("DELETE", "/v1/responses/{id}",
             [store](HttpRequest& request, std::shared_ptr<Exchange> exchange) {
               const std::string& id = request.params["id"];
               if (!store->erase(id)) return exchange->send_error(not_stored(id));
               exchange->send_json(200, json{{"id", id}, {"object", "response"}, {"deleted", true}});
             });
}

}  // namespace graft::server

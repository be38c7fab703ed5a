#include "server/chat_run.h"

#include <algorithm>
#include <mutex>

#include <fmt/format.h>

#include "server/chat_output.h"

namespace graft::server {

namespace {

class ChatRun : public std::enable_shared_from_this<ChatRun> {
 public:
  ChatRun(ServerContext& context, OpenAiRequest request, const std::string& prompt_text,
          std::shared_ptr<Exchange> exchange, std::shared_ptr<ChatWriter> writer)
      : model_(context.model),
        sink_hooks_(context.sink_hooks),
        request_(std::move(request)),
        exchange_(std::move(exchange)),
        writer_(std::move(writer)),
        output_(model_.chat_template(), !request_.tools.is_null(), prompt_opens_thinking(prompt_text)) {
    request_.generation.special_text = output_.needs_special_text();
  }

  void start() {
    auto self = shared_from_this();
    auto exchange = exchange_;
    EventSink sink = [self, exchange](GenerationEvent&& event) {
      exchange->post([self, e = std::move(event)]() mutable { self->on_event(std::move(e)); });
    };
    for (const SinkHook& hook : sink_hooks_) sink = hook(std::move(sink));
    const int prompt_tokens = static_cast<int>(request_.generation.prompt.size());
    auto id = model_.engine().submit(request_.generation, std::move(sink));
    if (!id) {
      const ApiError error = api_error(id.error());
      const bool about_prompt =
          error.code == ApiCode::kContextLengthExceeded || error.code == ApiCode::kInvalidValue;
      writer_->fail(api_error(error.code, error.message, about_prompt ? "messages" : ""));
      return;
    }
    Engine* engine = &model_.engine();
    RequestId rid = *id;
    exchange_->on_disconnect([engine, rid] { engine->cancel(rid); });
    writer_->begin(prompt_tokens);
  }

 private:
  void on_event(GenerationEvent&& event) {
    if (event.done) request_.generation.keep_alive.reset();
    if (event.done &&
        (event.finish_reason == FinishReason::kError || event.finish_reason == FinishReason::kCancelled)) {
      writer_->fail(event.finish_reason == FinishReason::kError
                        ? api_error(ApiCode::kInternal, event.error)
                        : api_error(ApiCode::kUnavailable, "the request was cancelled"));
      return;
    }
    std::vector<RequestJson> deltas = output_.push(event.text);
    if (event.done) {
      for (auto& d : output_.finish()) deltas.push_back(std::move(d));
    }
    for (const RequestJson& d : deltas) {
      add(d);
      writer_->delta(d);
    }
    if (!event.done) return;
    ChatResult result;
    result.message = RequestJson{{"role", "assistant"}};
    result.tool_calls = !calls_.empty();
    result.message["content"] =
        result.tool_calls && content_.empty() ? RequestJson(nullptr) : RequestJson(content_);
    if (!reasoning_.empty()) result.message["reasoning_content"] = reasoning_;
    if (result.tool_calls) result.message["tool_calls"] = calls_;
    result.finish_reason = event.finish_reason;
    result.stop = event.stop;
    result.usage = event.usage;
    writer_->done(result);
  }

  void add(const RequestJson& d) {
    if (d.contains("content")) content_ += d["content"].get<std::string>();
    if (d.contains("reasoning_content")) reasoning_ += d["reasoning_content"].get<std::string>();
    if (d.contains("tool_calls")) {
      for (const RequestJson& call : d["tool_calls"]) {
        calls_.push_back(
            RequestJson{{"id", call["id"]}, {"type", "function"}, {"function", call["function"]}});
      }
    }
  }

  ServedModel& model_;
  const std::vector<SinkHook>& sink_hooks_;
  OpenAiRequest request_;
  std::shared_ptr<Exchange> exchange_;
  std::shared_ptr<ChatWriter> writer_;
  ChatOutput output_;
  std::string content_;
  std::string reasoning_;
  RequestJson calls_ = RequestJson::array();
};

}  // namespace

void start_chat_run(ServerContext& context, OpenAiRequest request, const std::string& prompt_text,
                    std::shared_ptr<Exchange> exchange, std::shared_ptr<ChatWriter> writer) {
  auto run = std::make_shared<ChatRun>(context, std::move(request), prompt_text, std::move(exchange),
                                       std::move(writer));
  run->start();
}

std::optional<ApiError> render_chat_prompt(ServedModel& model, OpenAiRequest& request,
                                           std::string& prompt_text) {
  ChatRenderOptions options;
  options.add_generation_prompt = true;
  options.bos_token = model.bos_text();
  options.eos_token = model.eos_text();
  options.extra_kwargs = request.template_kwargs;
  auto prompt = model.chat_template().render(request.messages, request.tools, options);
  if (!prompt) {
    return bad_request(
        "cannot format the conversation with the model's chat template: " + prompt.error().message,
        "messages", ApiCode::kTemplateError);
  }
  const Tokenizer& tok = *model.tokenizer();
  auto tokens = tok.encode(*prompt, /*add_special=*/false, /*parse_special=*/true);
  if (!tokens) return bad_request(tokens.error().message, "messages");
  if (tok.add_bos() && tok.bos() >= 0 && (tokens->empty() || tokens->front() != tok.bos())) {
    tokens->insert(tokens->begin(), tok.bos());
  }
  request.generation.prompt = std::move(*tokens);
  prompt_text = std::move(*prompt);
  return std::nullopt;
}

void when_prepared(ServerContext& context, const RequestJson& body, const std::shared_ptr<Exchange>& exchange,
                   std::function<void(std::optional<ApiError> error)> next) {
  if (!context.prepare) return next(std::nullopt);
  // Whether the hook answered before it returned (then `next` runs here).
  struct State {
    std::mutex mutex;
    bool returned = false;
    bool answered = false;
    std::optional<ApiError> error;
    std::shared_ptr<void> hold;
  };
  auto state = std::make_shared<State>();
  context.prepare(body, [state, exchange, next](std::optional<ApiError> error, std::shared_ptr<void> hold) {
    {
      std::lock_guard lock(state->mutex);
      if (!state->returned) {
        state->answered = true;
        state->error = std::move(error);
        state->hold = std::move(hold);
        return;
      }
    }
    exchange->post([next, error = std::move(error), hold = std::move(hold)]() mutable {
      next(std::move(error));
      hold.reset();
    });
  });
  std::unique_lock lock(state->mutex);
  state->returned = true;
  if (!state->answered) return;
  lock.unlock();
  next(std::move(state->error));
  state->hold.reset();
}

std::optional<ApiError> check_model_name(const ServerContext& context, const RequestJson& body) {
  if (std::find(context.hook_fields.begin(), context.hook_fields.end(), "model") !=
      context.hook_fields.end()) {
    return std::nullopt;  // a hook reads it (adapters: a model may name one)
  }
  auto it = body.find("model");
  if (it == body.end() || !it->is_string() || context.model.answers_to(it->get<std::string>())) {
    return std::nullopt;
  }
  return api_error(ApiCode::kModelNotFound,
                   fmt::format("the model '{}' does not exist: this server serves '{}'",
                               it->get<std::string>(), context.model.id()),
                   "model");
}

std::optional<ApiError> prepare_chat(ServerContext& context, const RequestJson& chat, OpenAiRequest& request,
                                     std::string& prompt_text) {
  request.generation.sampling = context.model.sampling_defaults().options;
  if (auto error = read_openai_request(chat, ApiKind::kChat, context.model.tokenizer()->n_vocab(), request)) {
    return error;
  }
  if (auto error = check_model_name(context, chat)) return error;
  for (const auto& hook : context.request_hooks) {
    if (auto error = hook(chat, request.generation)) return error;
  }
  return render_chat_prompt(context.model, request, prompt_text);
}

}  // namespace graft::server

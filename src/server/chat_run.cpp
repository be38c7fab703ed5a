#include "server/chat_run.h"

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

std::optional<ApiError> prepare_chat(ServerContext& context, const RequestJson& chat, OpenAiRequest& request,
                                     std::string& prompt_text) {
  request.generation.sampling = context.model.sampling_defaults().options;
  if (auto error = read_openai_request(chat, ApiKind::kChat, context.model.tokenizer()->n_vocab(), request)) {
    return error;
  }
  for (const auto& hook : context.request_hooks) {
    if (auto error = hook(chat, request.generation)) return error;
  }
  return render_chat_prompt(context.model, request, prompt_text);
}

}  // namespace graft::server

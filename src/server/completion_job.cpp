#include "server/completion_job.h"

#include <chrono>
#include <random>

#include <fmt/format.h>

#include "server/chat_output.h"
#include "util/log.h"

namespace graft::server {

namespace {

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* digits = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += digits[rng() % 62];
  return id;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

RequestJson bytes_of(const std::string& s) {
  RequestJson bytes = RequestJson::array();
  for (unsigned char c : s) bytes.push_back(static_cast<int>(c));
  return bytes;
}

RequestJson timings_json(const Timings& t) {
  return RequestJson{{"queued_ms", t.queued_ms},
                     {"ttft_ms", t.ttft_ms},
                     {"generation_ms", t.generation_ms},
                     {"tokens_per_second", t.tokens_per_second}};
}

class CompletionJob : public std::enable_shared_from_this<CompletionJob> {
 public:
  CompletionJob(ServerContext& context, OpenAiRequest request, std::string prompt_text,
                std::shared_ptr<Exchange> exchange)
      : model_(context.model),
        sink_hooks_(context.sink_hooks),
        request_(std::move(request)),
        prompt_text_(std::move(prompt_text)),
        exchange_(std::move(exchange)),
        chat_(request_.kind == ApiKind::kChat),
        id_(random_id(chat_ ? "chatcmpl-" : "cmpl-")),
        created_(unix_now()) {
    if (chat_) {
      output_ = std::make_unique<ChatOutput>(model_.chat_template(), !request_.tools.is_null(),
                                             prompt_opens_thinking(prompt_text_));
      request_.generation.special_text = output_->needs_special_text();
    }
  }

  void start() {
    request_.generation.id = id_;
    auto self = shared_from_this();
    auto exchange = exchange_;
    EventSink sink = [self, exchange](GenerationEvent&& event) {
      exchange->post([self, e = std::move(event)]() mutable { self->on_event(std::move(e)); });
    };
    for (const SinkHook& hook : sink_hooks_) sink = hook(std::move(sink));
    auto id = model_.engine().submit(request_.generation, std::move(sink));
    if (!id) {
      const ApiError error = api_error(id.error());
      const bool about_prompt =
          error.code == ApiCode::kContextLengthExceeded || error.code == ApiCode::kInvalidValue;
      exchange_->send_error(
          api_error(error.code, error.message, about_prompt ? (chat_ ? "messages" : "prompt") : ""));
      return;
    }
    Engine* engine = &model_.engine();
    RequestId rid = *id;
    exchange_->on_disconnect([engine, rid] { engine->cancel(rid); });
    if (request_.stream) {
      exchange_->start_events();
      if (chat_) send_chunk(RequestJson{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr);
      if (!chat_ && request_.echo) send_chunk(RequestJson(prompt_text_), nullptr, nullptr);
    }
  }

 private:
  void on_event(GenerationEvent&& event) {
    // The request is over once its last event comes: its adapters are free
    // before the client reads the answer (an unload right after it succeeds).
    if (event.done) request_.generation.keep_alive.reset();
    if (request_.logprobs) {
      for (const auto& t : event.tokens) pending_logprobs_.push_back(t);
    }
    completion_tokens_ += static_cast<int>(event.tokens.size());
    if (request_.stream) {
      stream_event(event);
    } else {
      text_ += event.text;
      if (event.done) answer_whole(event);
    }
  }

  // ---- streaming

  void stream_event(const GenerationEvent& event) {
    if (event.done &&
        (event.finish_reason == FinishReason::kError || event.finish_reason == FinishReason::kCancelled)) {
      if (event.finish_reason == FinishReason::kError) {
        exchange_->send_event(dump_json(api_error(ApiCode::kInternal, event.error).to_json()));
      }
      exchange_->send_event("[DONE]");
      exchange_->end_events();
      return;
    }
    if (chat_) {
      std::vector<RequestJson> deltas = output_->push(event.text);
      if (event.done) {
        for (auto& d : output_->finish()) deltas.push_back(std::move(d));
      }
      if (deltas.empty() && !pending_logprobs_.empty() && !event.done)
        deltas.push_back(RequestJson::object());
      for (size_t i = 0; i < deltas.size(); ++i) {
        bool last = i + 1 == deltas.size();
        RequestJson logprobs = last ? take_logprobs() : RequestJson(nullptr);
        send_chunk(deltas[i], &logprobs, nullptr);
      }
    } else if (!event.text.empty() || !pending_logprobs_.empty()) {
      RequestJson logprobs = take_logprobs();
      send_chunk(RequestJson(event.text), &logprobs, nullptr);
    }
    if (!event.done) return;
    RequestJson reason = finish_reason(event.finish_reason);
    send_chunk(chat_ ? RequestJson::object() : RequestJson(""), nullptr, &reason, &event);
    if (request_.include_usage) {
      RequestJson chunk = chunk_head();
      chunk["choices"] = RequestJson::array();
      chunk["usage"] = usage_json(event.usage);
      exchange_->send_event(dump_json(chunk));
    }
    exchange_->send_event("[DONE]");
    exchange_->end_events();
  }

  RequestJson chunk_head() const {
    return RequestJson{{"id", id_},
                       {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
                       {"created", created_},
                       {"model", model_name()},
                       {"system_fingerprint", "graft"}};
  }

  // delta: the chat delta object, or the completion text.
  void send_chunk(const RequestJson& delta, const RequestJson* logprobs, const RequestJson* reason,
                  const GenerationEvent* final_event = nullptr) {
    RequestJson chunk = chunk_head();
    RequestJson choice = {{"index", 0}};
    if (chat_) {
      choice["delta"] = delta;
    } else {
      choice["text"] = delta;
    }
    choice["logprobs"] = logprobs ? *logprobs : RequestJson(nullptr);
    choice["finish_reason"] = reason ? *reason : RequestJson(nullptr);
    chunk["choices"] = RequestJson::array({choice});
    if (final_event && !request_.include_usage) chunk["usage"] = usage_json(final_event->usage);
    if (final_event) chunk["timings"] = timings_json(final_event->timings);
    exchange_->send_event(dump_json(chunk));
  }

  // ---- whole response

  void answer_whole(const GenerationEvent& event) {
    if (event.finish_reason == FinishReason::kError || event.finish_reason == FinishReason::kCancelled) {
      exchange_->send_error(event.finish_reason == FinishReason::kError
                                ? api_error(ApiCode::kInternal, event.error)
                                : api_error(ApiCode::kUnavailable, "the request was cancelled"));
      return;
    }
    RequestJson choice = {{"index", 0}};
    if (chat_) {
      choice["message"] = output_->message(text_);
    } else {
      choice["text"] = request_.echo ? prompt_text_ + text_ : text_;
    }
    choice["logprobs"] = request_.logprobs ? take_logprobs() : RequestJson(nullptr);
    choice["finish_reason"] = finish_reason(event.finish_reason);
    RequestJson body = {{"id", id_},
                        {"object", chat_ ? "chat.completion" : "text_completion"},
                        {"created", created_},
                        {"model", model_name()},
                        {"system_fingerprint", "graft"},
                        {"choices", RequestJson::array({choice})},
                        {"usage", usage_json(event.usage)},
                        {"timings", timings_json(event.timings)}};
    exchange_->send(HttpResponse{200, "application/json", dump_json(body), {}});
  }

  RequestJson finish_reason(FinishReason reason) const {
    if (chat_ && output_->saw_tool_calls() && reason == FinishReason::kStop) return "tool_calls";
    return to_string(reason);
  }

  // The logprobs of the tokens since the last call, in the API's shape.
  RequestJson take_logprobs() {
    if (!request_.logprobs) return nullptr;
    std::vector<GeneratedToken> tokens = std::move(pending_logprobs_);
    pending_logprobs_.clear();
    if (chat_) {
      RequestJson content = RequestJson::array();
      for (const auto& t : tokens) {
        std::string piece = model_.token_piece(t.id);
        RequestJson top = RequestJson::array();
        for (const auto& alt : t.top) {
          std::string p = model_.token_piece(alt.id);
          top.push_back({{"token", p}, {"logprob", alt.logprob}, {"bytes", bytes_of(p)}});
        }
        content.push_back(
            {{"token", piece}, {"logprob", t.logprob}, {"bytes", bytes_of(piece)}, {"top_logprobs", top}});
      }
      return RequestJson{{"content", content}};
    }
    RequestJson out = {{"tokens", RequestJson::array()},
                       {"token_logprobs", RequestJson::array()},
                       {"top_logprobs", RequestJson::array()},
                       {"text_offset", RequestJson::array()}};
    for (const auto& t : tokens) {
      std::string piece = model_.token_piece(t.id);
      out["tokens"].push_back(piece);
      out["token_logprobs"].push_back(t.logprob);
      RequestJson top = RequestJson::object();
      for (const auto& alt : t.top) top[model_.token_piece(alt.id)] = alt.logprob;
      out["top_logprobs"].push_back(top);
      out["text_offset"].push_back(text_offset_);
      text_offset_ += static_cast<int64_t>(piece.size());
    }
    return out;
  }

  // The served model's id, or the adapter (or stack) the request named as its
  // model, as vLLM answers a LoRA's name.
  std::string model_name() const {
    return request_.model.empty() || model_.answers_to(request_.model) ? model_.id() : request_.model;
  }

  ServedModel& model_;
  const std::vector<SinkHook>& sink_hooks_;
  OpenAiRequest request_;
  std::string prompt_text_;
  std::shared_ptr<Exchange> exchange_;
  bool chat_;
  std::string id_;
  int64_t created_;
  std::unique_ptr<ChatOutput> output_;
  std::string text_;
  std::vector<GeneratedToken> pending_logprobs_;
  int completion_tokens_ = 0;
  int64_t text_offset_ = 0;
};

}  // namespace

RequestJson usage_json(const Usage& usage) {
  return RequestJson{{"prompt_tokens", usage.prompt_tokens},
                     {"completion_tokens", usage.completion_tokens},
                     {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
                     {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}}};
}

void start_completion(ServerContext& context, OpenAiRequest request, std::string prompt_text,
                      std::shared_ptr<Exchange> exchange) {
  auto job = std::make_shared<CompletionJob>(context, std::move(request), std::move(prompt_text),
                                             std::move(exchange));
  job->start();
}

}  // namespace graft::server

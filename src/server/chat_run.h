// ChatRun: one chat request between HTTP and the engine for the APIs that
// are not OpenAI's chat completions (Anthropic Messages, OpenAI Responses).
// It submits the request, parses the generated text with ChatOutput (the same
// parser /v1/chat/completions uses) and hands the parsed deltas and the whole
// result to a ChatWriter, which puts them in its API's shape. All calls to the
// writer come on the connection's strand.
#pragma once

#include <memory>
#include <string>

#include "server/context.h"
#include "server/http.h"
#include "server/openai_params.h"

namespace graft::server {

struct ChatResult {
  // The assistant message: content, reasoning_content (when any), tool_calls
  // (when any), as /v1/chat/completions answers it.
  RequestJson message;
  FinishReason finish_reason = FinishReason::kStop;
  bool tool_calls = false;  // the message holds tool calls
  std::string stop;         // the stop string that ended it, if one did
  Usage usage;
};

class ChatWriter {
 public:
  virtual ~ChatWriter() = default;
  // The engine took the request (prompt_tokens long).
  virtual void begin(int prompt_tokens) = 0;
  // Streaming: one parsed delta ({"content"}, {"reasoning_content"} or
  // {"tool_calls": [one whole call]}), in order; they add up to the result.
  virtual void delta(const RequestJson& delta) = 0;
  virtual void done(const ChatResult& result) = 0;
  // The request failed: before begin() (the engine refused it) or after.
  virtual void fail(const ApiError& error) = 0;
};

// Submits `request` (its generation.prompt tokenized from prompt_text, the
// rendered chat) and reports to `writer`; cancels it if the client goes away.
void start_chat_run(ServerContext& context, OpenAiRequest request, const std::string& prompt_text,
                    std::shared_ptr<Exchange> exchange, std::shared_ptr<ChatWriter> writer);

// Renders the chat of `request` (messages, tools, template kwargs) with the
// model's template and tokenizes it into request.generation.prompt; the
// rendered text goes to prompt_text.
std::optional<ApiError> render_chat_prompt(ServedModel& model, OpenAiRequest& request,
                                           std::string& prompt_text);

// Runs the context's prepare hook (if any) on a request body, then `next` on
// the exchange's strand: right here when nothing had to wait, else later.
// `next` gets the hook's error, if any, to answer in its API's shape.
void when_prepared(ServerContext& context, const RequestJson& body, const std::shared_ptr<Exchange>& exchange,
                   std::function<void(std::optional<ApiError> error)> next);

// Checks the request's "model" when no request hook reads it: the served
// model's id or an alias, else a 404 model_not_found.
std::optional<ApiError> check_model_name(const ServerContext& context, const RequestJson& body);

// Reads a /v1/chat/completions body (the translation of another API's
// request) into `request` as that route does — the served model's sampling
// defaults, the fields, the request hooks (adapter) — and renders its prompt.
std::optional<ApiError> prepare_chat(ServerContext& context, const RequestJson& chat, OpenAiRequest& request,
                                     std::string& prompt_text);

}  // namespace graft::server

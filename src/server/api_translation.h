// Translation between the Anthropic Messages API / the OpenAI Responses API
// and graft's chat request: each request body becomes the equivalent
// /v1/chat/completions body (read then by read_openai_request, rendered by the
// same chat template), and the parsed assistant message goes back into the
// API's own shapes. A field graft cannot honour is a 400 naming it; a field
// neither API knows is a 400 too (both APIs refuse unknown parameters).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/http.h"
#include "server/openai_params.h"

namespace graft::server {

// ---- Anthropic Messages (POST /v1/messages, /v1/messages/count_tokens)

// count_tokens: the request without max_tokens, stream and the sampling fields.
enum class AnthropicKind { kMessages, kCountTokens };

// `extra_fields`: top-level fields read elsewhere (the request hooks', e.g.
// "adapter"); they are copied into `chat` as they are.
std::optional<ApiError> anthropic_to_chat(const RequestJson& body, AnthropicKind kind,
                                          const std::vector<std::string>& extra_fields, RequestJson& chat);

// An error in Anthropic's shape: {"type": "error", "error": {"type", "message"}}.
RequestJson anthropic_error_json(const ApiError& error);

// "end_turn", "max_tokens", "stop_sequence" (stop: the stop string that
// ended the answer, else "") or "tool_use".
std::string anthropic_stop_reason(FinishReason reason, bool tool_calls, const std::string& stop = {});

// The content blocks of an assistant message as /v1/chat/completions gives it
// (content, reasoning_content, tool_calls): thinking, text, tool_use.
RequestJson anthropic_content(const RequestJson& message);

// ---- OpenAI Responses (POST /v1/responses)

// `history`: the chat messages of the previous_response_id chain (its inputs
// and outputs), put before this request's instructions... input.
std::optional<ApiError> responses_to_chat(const RequestJson& body, const RequestJson& history,
                                          const std::vector<std::string>& extra_fields, RequestJson& chat);

// The chat messages of a Responses `input` (a string or a list of items).
std::optional<ApiError> responses_input_messages(const RequestJson& input, RequestJson& messages);

// The output items of an assistant message: reasoning, message (output_text),
// function_call; ids made from `id_seed`.
RequestJson responses_output(const RequestJson& message, const std::string& id_seed);

// The usage object of a response.
RequestJson responses_usage(const Usage& usage);

// A fresh id: prefix + 24 letters and digits.
std::string random_api_id(const char* prefix);

}  // namespace graft::server

// Reading OpenAI-style request bodies (/v1/completions, /v1/chat/completions)
// into an engine request. A wrong type or a value out of range is a 400 that
// names the field, and so is a field that asks for a feature graft lacks
// (openai_fields.h); fields nobody knows are left to the caller to log.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/http.h"

namespace graft::server {

// Request bodies keep their key order (tools reach the chat template as sent).
using RequestJson = nlohmann::ordered_json;

enum class ApiKind { kCompletions, kChat };

struct OpenAiRequest {
  ApiKind kind = ApiKind::kCompletions;
  GenerationRequest generation;  // everything but the prompt tokens
  std::string model;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;  // return logprobs of the chosen tokens
  int top_logprobs = 0;   // and this many alternatives each

  // /v1/completions: a text, or token ids.
  std::string prompt_text;
  std::vector<TokenId> prompt_tokens;
  bool prompt_is_tokens = false;
  bool echo = false;

  // /v1/chat/completions
  RequestJson messages;
  RequestJson tools;  // null: no tools
  RequestJson template_kwargs = RequestJson::object();
};

// Parses the body text into a JSON object (400 for malformed JSON or a non-object).
std::optional<ApiError> parse_body(const std::string& text, RequestJson& body);

// Reads the fields of one request into `out`; what the body leaves out keeps
// out's value (e.g. the served model's sampling defaults). n_vocab bounds
// token ids (prompt, logit_bias).
std::optional<ApiError> read_openai_request(const RequestJson& body, ApiKind kind, int n_vocab,
                                            OpenAiRequest& out);

}  // namespace graft::server

// CompletionJob: one completion or chat request between HTTP and the engine.
// It submits the request, turns the engine's events into OpenAI JSON — a
// whole response, or SSE chunks as they come — and cancels the request when
// the client goes away. All its state lives on the connection's strand.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/context.h"
#include "server/http.h"
#include "server/openai_params.h"

namespace graft::server {

// Submits `request` (its generation.prompt already tokenized) and answers
// through `exchange`. prompt_text is the rendered prompt (for echo).
void start_completion(ServerContext& context, OpenAiRequest request, std::string prompt_text,
                      std::shared_ptr<Exchange> exchange);

// The usage object of a response.
RequestJson usage_json(const Usage& usage);

}  // namespace graft::server

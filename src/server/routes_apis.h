// Anthropic's Messages API on graft's server:
//   POST /v1/messages   POST /v1/messages/count_tokens
// and OpenAI's Responses API:
//   POST /v1/responses   GET/DELETE /v1/responses/{id}
#pragma once

#include "server/context.h"
#include "server/router.h"

namespace graft::server {

void add_anthropic_routes(Router& router, ServerContext& context);
void add_responses_routes(Router& router, ServerContext& context);

}  // namespace graft::server

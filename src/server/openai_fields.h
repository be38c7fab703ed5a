// Which fields of a completion or chat request graft reads, and which it
// knows from OpenAI or llama-server but does not implement. A request that
// asks for an unimplemented feature gets a 400 naming the field, never a
// silent fallback; a field nobody knows is ignored (as OpenAI-compatible
// servers do) and logged at debug level.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/http.h"
#include "server/openai_params.h"

namespace graft::server {

// A 400 (code "unsupported_parameter") for the first field that asks for a
// feature graft lacks. Such a field may still be sent with the value that
// turns its feature off (mirostat 0, grammar "", cache_prompt true, ...), as
// clients that send every option do; the fields that only tune such a
// feature (mirostat_tau, dry_base, ...) are accepted while it is off.
std::optional<ApiError> check_unsupported_fields(const RequestJson& body);

// The top-level fields of `body` that graft neither reads for this kind of
// request nor knows as unsupported; `also_known` adds fields read elsewhere
// (the request hooks' fields, e.g. "adapter").
std::vector<std::string> unknown_fields(const RequestJson& body, ApiKind kind,
                                        const std::vector<std::string>& also_known);

}  // namespace graft::server

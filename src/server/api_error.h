// The error codes graft's HTTP API answers with. ApiCode is the closed list;
// api_error.cpp holds the one table that gives each code its wire name, HTTP
// status and OpenAI error type, and the one mapping from the short tokens of
// lower layers' errors (util/result.h) to an ApiCode. No other file picks an
// HTTP status or error type for an error.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "util/result.h"

namespace graft::server {

enum class ApiCode {
  // 400: the request is wrong
  kInvalidJson,            // the body is not JSON, or not an object
  kInvalidType,            // a field has the wrong JSON type
  kInvalidValue,           // a field's value is out of range or malformed
  kUnsupportedParameter,   // a field graft knows but does not implement
  kUnsupportedValue,       // a value graft knows but does not implement
  kUnknownParameter,       // a field graft does not know, where it checks every field
  kMissingParameter,       // a required field is absent
  kContextLengthExceeded,  // the prompt leaves the context no room
  kTemplateError,          // the chat template refuses the conversation
  kInvalidAdapterSpec,     // the "adapter" field does not parse
  kAdapterNotFound,        // an adapter neither loaded nor in the store
  kAdapterNotLoaded,       // an adapter in the store, not loaded
  kAdapterCorrupt,         // an adapter file that cannot be read
  kAdapterIncompatible,    // an adapter made for another model
  // 401, 403, 404, 405, 409, 413
  kInvalidApiKey,
  kForbidden,  // a path outside the adapter folders
  kNotFound,
  kModelNotFound,
  kMethodNotAllowed,
  kConflict,  // the adapter id is loaded or loading already
  kInUse,     // the adapter is used by a request
  kRequestTooLarge,
  // 500, 503
  kInternal,     // graft failed: a bug, a failed computation, an I/O error
  kOutOfMemory,  // graft could not allocate what the request needs
  kOverloaded,   // too many requests waiting
  kUnavailable,  // the server is shutting down, or the request was cancelled
};

std::string_view code_name(ApiCode code);   // "invalid_value", …
int http_status(ApiCode code);              // 400, 404, …
std::string_view error_type(ApiCode code);  // OpenAI's type: "invalid_request_error", …

// The code for a lower layer's error token ("invalid_argument",
// "incompatible_adapter", …); tokens with no client-side meaning are kInternal.
ApiCode code_for(const Error& error);

using json = nlohmann::json;

// An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  ApiCode code = ApiCode::kInvalidValue;
  std::string message;
  std::string param;  // the request field at fault, or ""

  int status() const { return http_status(code); }
  json to_json() const;
};

ApiError api_error(ApiCode code, std::string message, std::string param = {});
// A lower layer's error, its code mapped by code_for.
ApiError api_error(const Error& error, std::string param = {});
// A 400 about a request field (kInvalidValue unless another code is given).
ApiError bad_request(std::string message, std::string param = {}, ApiCode code = ApiCode::kInvalidValue);

}  // namespace graft::server

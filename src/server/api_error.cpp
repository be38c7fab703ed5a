#include "server/api_error.h"

#include <array>
#include <utility>

namespace graft::server {

namespace {

struct CodeInfo {
  ApiCode code;
  std::string_view name;
  int status;
  std::string_view type;
};

constexpr std::string_view kInvalid = "invalid_request_error";
constexpr std::string_view kServer = "server_error";

// The one table: every ApiCode, in declaration order.
constexpr std::array kCodes = {
    CodeInfo{ApiCode::kInvalidJson, "invalid_json", 400, kInvalid},
    CodeInfo{ApiCode::kInvalidType, "invalid_type", 400, kInvalid},
    CodeInfo{ApiCode::kInvalidValue, "invalid_value", 400, kInvalid},
    CodeInfo{ApiCode::kUnsupportedParameter, "unsupported_parameter", 400, kInvalid},
    CodeInfo{ApiCode::kUnsupportedValue, "unsupported_value", 400, kInvalid},
    CodeInfo{ApiCode::kUnknownParameter, "unknown_parameter", 400, kInvalid},
    CodeInfo{ApiCode::kMissingParameter, "missing_parameter", 400, kInvalid},
    CodeInfo{ApiCode::kContextLengthExceeded, "context_length_exceeded", 400, kInvalid},
    CodeInfo{ApiCode::kTemplateError, "template_error", 400, kInvalid},
    CodeInfo{ApiCode::kInvalidAdapterSpec, "invalid_adapter_spec", 400, kInvalid},
    CodeInfo{ApiCode::kAdapterNotFound, "adapter_not_found", 400, kInvalid},
    CodeInfo{ApiCode::kAdapterNotLoaded, "adapter_not_loaded", 400, kInvalid},
    CodeInfo{ApiCode::kAdapterCorrupt, "adapter_corrupt", 400, kInvalid},
    CodeInfo{ApiCode::kAdapterIncompatible, "adapter_incompatible", 400, kInvalid},
    CodeInfo{ApiCode::kInvalidApiKey, "invalid_api_key", 401, "authentication_error"},
    CodeInfo{ApiCode::kForbidden, "forbidden", 403, "permission_error"},
    CodeInfo{ApiCode::kNotFound, "not_found", 404, kInvalid},
    CodeInfo{ApiCode::kModelNotFound, "model_not_found", 404, kInvalid},
    CodeInfo{ApiCode::kMethodNotAllowed, "method_not_allowed", 405, kInvalid},
    CodeInfo{ApiCode::kConflict, "conflict", 409, "conflict_error"},
    CodeInfo{ApiCode::kInUse, "in_use", 409, "conflict_error"},
    CodeInfo{ApiCode::kRequestTooLarge, "request_too_large", 413, kInvalid},
    CodeInfo{ApiCode::kInternal, "internal_error", 500, kServer},
    CodeInfo{ApiCode::kOutOfMemory, "out_of_memory", 503, kServer},
    CodeInfo{ApiCode::kOverloaded, "overloaded", 503, kServer},
    CodeInfo{ApiCode::kUnavailable, "unavailable", 503, kServer},
};

constexpr bool table_in_order() {
  for (size_t i = 0; i < kCodes.size(); ++i) {
    if (static_cast<size_t>(kCodes[i].code) != i) return false;
  }
  return static_cast<size_t>(ApiCode::kUnavailable) + 1 == kCodes.size();
}
static_assert(table_in_order(), "kCodes lists every ApiCode once, in declaration order");

const CodeInfo& info(ApiCode code) {
  return kCodes[static_cast<size_t>(code)];
}

// Lower layers' tokens (util/result.h) and the code each one answers with.
constexpr std::pair<std::string_view, ApiCode> kTokens[] = {
    {"invalid_argument", ApiCode::kInvalidValue},
    {"invalid_request", ApiCode::kInvalidValue},
    {"invalid_value", ApiCode::kInvalidValue},
    {"invalid_type", ApiCode::kInvalidType},
    {"invalid_json", ApiCode::kInvalidJson},
    {"context_length_exceeded", ApiCode::kContextLengthExceeded},
    {"template_error", ApiCode::kTemplateError},
    {"invalid_adapter_spec", ApiCode::kInvalidAdapterSpec},
    // A file that does not read as an adapter: the only files a request reads.
    {"invalid_adapter", ApiCode::kAdapterCorrupt},
    {"invalid_file", ApiCode::kAdapterCorrupt},
    {"missing_key", ApiCode::kAdapterCorrupt},
    {"missing_tensor", ApiCode::kAdapterCorrupt},
    {"incompatible_adapter", ApiCode::kAdapterIncompatible},
    {"forbidden", ApiCode::kForbidden},
    {"not_found", ApiCode::kNotFound},
    {"conflict", ApiCode::kConflict},
    {"already_exists", ApiCode::kConflict},
    {"in_use", ApiCode::kInUse},
    {"out_of_memory", ApiCode::kOutOfMemory},
    {"overloaded", ApiCode::kOverloaded},
    {"unavailable", ApiCode::kUnavailable},
};

}  // namespace

std::string_view code_name(ApiCode code) {
  return info(code).name;
}

int http_status(ApiCode code) {
  return info(code).status;
}

std::string_view error_type(ApiCode code) {
  return info(code).type;
}

ApiCode code_for(const Error& error) {
  for (const auto& [token, code] : kTokens) {
    if (error.code == token) return code;
  }
  return ApiCode::kInternal;
}

json ApiError::to_json() const {
  return json{{"error",
               {{"message", message},
                {"type", error_type(code)},
                {"param", param.empty() ? json(nullptr) : json(param)},
                {"code", code_name(code)}}}};
}

ApiError api_error(ApiCode code, std::string message, std::string param) {
  return ApiError{code, std::move(message), std::move(param)};
}

ApiError api_error(const Error& error, std::string param) {
  return api_error(code_for(error), error.message, std::move(param));
}

ApiError bad_request(std::string message, std::string param, ApiCode code) {
  return api_error(code, std::move(message), std::move(param));
}

}  // namespace graft::server

// multipart/form-data (RFC 7578) bodies, as browsers and the OpenAI SDKs send
// file uploads. The parts are views into the body: no copy of a large file.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace graft::server {

struct FormPart {
  std::string name;                     // the form field
  std::optional<std::string> filename;  // set for a file
  std::string content_type;             // "" when the part names none
  std::string_view data;                // the part's bytes, inside the body
};

// The boundary from a Content-Type header, if it is multipart/form-data.
std::optional<std::string> multipart_boundary(std::string_view content_type);

// Every part of a body. Errors say what is malformed.
Result<std::vector<FormPart>> parse_multipart(std::string_view body, std::string_view boundary);

}  // namespace graft::server

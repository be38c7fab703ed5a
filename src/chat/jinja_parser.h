// Parses template source into a syntax tree, following jinja2's grammar and
// operator precedence.
#pragma once

#include <string_view>

#include "chat/jinja_ast.h"

namespace graft::jinja {

// Fails (TemplateError with the line) on a syntax error or an unsupported tag.
Program parse_program(std::string_view source);

}  // namespace graft::jinja

// Splits template source into text and tag tokens, applying whitespace
// control the way Hugging Face configures jinja2 (trim_blocks and
// lstrip_blocks on; `{%-`/`-%}` strip, `{%+`/`+%}` opt out).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace graft::jinja {

enum class TokenType {
  text,
  expr_open,   // {{
  expr_close,  // }}
  stmt_open,   // {%
  stmt_close,  // %}
  name,
  string,
  integer,
  floating,
  op,  // punctuation and operators: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : |
  eof,
};

struct Token {
  TokenType type;
  std::string value;  // text, name, decoded string literal, number or operator
  int line;
};

// Fails (TemplateError) on an unterminated tag, comment or string.
std::vector<Token> tokenize(std::string_view source);

}  // namespace graft::jinja

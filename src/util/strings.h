// Small string helpers graft's layers share (C++20's starts_with/ends_with
// cover prefixes and suffixes). ASCII only: UTF-8 lives in util/utf8.h.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace graft {

// Space, tab, newline, carriage return, vertical tab, form feed.
constexpr bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// s without the ASCII whitespace at both ends.
std::string_view trim(std::string_view s);

// The pieces of s between separators (empty pieces included).
std::vector<std::string_view> split(std::string_view s, char separator);

// A copy with A-Z made a-z.
std::string to_lower_ascii(std::string_view s);

}  // namespace graft

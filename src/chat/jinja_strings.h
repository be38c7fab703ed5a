// Python's str operations that templates use, over UTF-8 text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace graft::jinja {

enum class StripSide { both, left, right };

// str.strip(); with `chars` null: Python's whitespace.
std::string py_strip(std::string_view s, const std::string* chars, StripSide side);
// str.split(sep, maxsplit) and str.rsplit; a null sep splits on runs of whitespace.
std::vector<std::string> py_split(std::string_view s, const std::string* sep, std::int64_t maxsplit,
                                  bool from_right);
std::vector<std::string> py_splitlines(std::string_view s);
std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement,
                       std::int64_t count);
// ASCII case mapping (other letters pass through unchanged).
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);
std::string py_capitalize(std::string_view s);
bool is_python_space(std::string_view code_point);
// markupsafe's escape(): & < > ' " as entities.
std::string html_escape(std::string_view s);

}  // namespace graft::jinja

// The built-in filters, tests, functions and methods of the template
// language, and jinja2's rules for attribute access, items and iteration.
#pragma once

#include <string_view>
#include <vector>

#include "chat/jinja_callable.h"
#include "chat/jinja_value.h"

namespace graft::jinja {

class Interpreter;

// Attribute and item access with jinja2's rules (methods first for `.`,
// items first for `[]`); undefined when missing.
Value get_attribute(const Value& object, std::string_view name, int line);
Value get_item(const Value& object, const Value& key, int line);
// The elements a for loop or filter iterates over.
std::vector<Value> iterate(const Value& v, int line);

// Filters, tests and global functions (jinja_builtins.cpp); methods (jinja_methods.cpp).
Value call_filter(Interpreter& in, std::string_view name, const Value& input, const CallArgs& args, int line);
bool call_test(Interpreter& in, std::string_view name, const Value& input, const CallArgs& args, int line);
const Value* find_global_function(std::string_view name);
bool has_method(const Value& object, std::string_view name);
Value call_method(Interpreter& in, const Value& object, std::string_view name, const CallArgs& args,
                  int line);
// Python's x[start:stop:step] for lists and strings; none means "omitted".
Value slice(const Value& object, const Value& start, const Value& stop, const Value& step, int line);

bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

}  // namespace graft::jinja

// Python's arithmetic (+ - * / // % **) and `in` over template values.
#pragma once

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace graft::jinja {

Value arithmetic(Op op, const Value& a, const Value& b, int line);
bool contains(const Value& container, const Value& item, int line);

}  // namespace graft::jinja

// Things a template can call (macros, built-in functions) and the `loop`
// object of a for loop.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace graft::jinja {

class Interpreter;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `position`, else the keyword `name`, else nullptr.
  const Value* find(std::size_t position, std::string_view name) const;
  // Fails if an argument beyond `max_positional` or a keyword outside `names` was given.
  void expect(std::string_view function, std::size_t max_positional,
              std::initializer_list<std::string_view> names, int line) const;
};

struct Callable {
  std::string name;
  explicit Callable(std::string n) : name(std::move(n)) {}
  virtual ~Callable() = default;
  virtual Value call(Interpreter& interpreter, const CallArgs& args, int line) const = 0;
};

struct LoopState {
  std::vector<Value> items;
  std::size_t index = 0;
  int depth = 1;
};

// The loop object's attributes (index, first, previtem, ...); undefined if unknown.
Value loop_attribute(const LoopState& loop, std::string_view name);

}  // namespace graft::jinja

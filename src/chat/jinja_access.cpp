// jinja2's rules for `x.name`, `x[key]` and iteration over template values.
#include <fmt/format.h>

#include "chat/jinja_builtins.h"

namespace graft::jinja {

namespace {

// `loop.cycle(a, b, ...)`: the argument at the current index, round robin.
struct LoopCycle : Callable {
  Value loop;  // keeps the loop state alive
  explicit LoopCycle(Value l) : Callable("cycle"), loop(std::move(l)) {}
  Value call(Interpreter&, const CallArgs& args, int line) const override {
    if (args.positional.empty()) fail("no items for cycling given", line);
    return args.positional[loop.loop().index % args.positional.size()];
  }
};

// A method taken as a value (`x.items` without calling it right away).
struct BoundMethod : Callable {
  Value self;
  BoundMethod(Value s, std::string name) : Callable(std::move(name)), self(std::move(s)) {}
  Value call(Interpreter& in, const CallArgs& args, int line) const override {
    return call_method(in, self, name, args, line);
  }
};

std::int64_t wrap_index(std::int64_t i, std::int64_t n) {
  return i < 0 ? i + n : i;
}

}  // namespace

Value get_attribute(const Value& object, std::string_view name, int line) {
  switch (object.kind()) {
    case Value::Kind::undefined:
      fail(object.undefined_what(), line);
    case Value::Kind::ns: {
      auto it = object.ns().attrs.find(name);
      if (it != object.ns().attrs.end()) return it->second;
      return Value::undefined(fmt::format("'namespace' object has no attribute '{}'", name));
    }
    case Value::Kind::loop:
      if (name == "cycle") return Value(std::make_shared<const LoopCycle>(object));
      return loop_attribute(object.loop(), name);
    case Value::Kind::callable:
      return Value::undefined(fmt::format("'function' object has no attribute '{}'", name));
    case Value::Kind::json:
      break;
  }
  if (has_method(object, name)) return Value(std::make_shared<const BoundMethod>(object, std::string(name)));
  if (object.is_object()) {
    auto it = object.json().find(std::string(name));
    if (it != object.json().end()) return object.member(*it);
  }
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(object), name));
}

Value get_item(const Value& object, const Value& key, int line) {
  switch (object.kind()) {
    case Value::Kind::undefined:
      fail(object.undefined_what(), line);
    case Value::Kind::ns:
    case Value::Kind::loop:
      if (key.is_string()) return get_attribute(object, key.str(), line);
      return Value::undefined(fmt::format("{} has no item {}", type_name(object), repr(key)));
    case Value::Kind::callable:
      fail("'function' object is not subscriptable", line);
    case Value::Kind::json:
      break;
  }
  const Json& j = object.json();
  if (j.is_object()) {
    if (std::optional<std::string> stored = dict_key(key)) {
      auto it = j.find(*stored);
      if (it != j.end()) return object.member(*it);
      if (key.is_string() && has_method(object, key.str())) return get_attribute(object, key.str(), line);
    }
    return Value::undefined(fmt::format("'dict object' has no attribute {}", repr(key)));
  }
  if (j.is_array() || j.is_string()) {
    if (!key.is_integer() && !key.is_bool()) {
      if (key.is_string()) return get_attribute(object, key.str(), line);
      fail(fmt::format("{} indices must be integers, not {}", type_name(object), type_name(key)), line);
    }
    if (j.is_array()) {
      auto n = static_cast<std::int64_t>(j.size());
      std::int64_t i = wrap_index(key.as_int(), n);
      if (i < 0 || i >= n) return Value::undefined(fmt::format("list index {} out of range", key.as_int()));
      return object.member(j[static_cast<std::size_t>(i)]);
    }
    auto chars = code_points(object.str());
    auto n = static_cast<std::int64_t>(chars.size());
    std::int64_t i = wrap_index(key.as_int(), n);
    if (i < 0 || i >= n) return Value::undefined(fmt::format("string index {} out of range", key.as_int()));
    return Value(std::string(chars[static_cast<std::size_t>(i)]));
  }
  return Value::undefined(fmt::format("'{}' object is not subscriptable", type_name(object)));
}

std::vector<Value> iterate(const Value& v, int line) {
  std::vector<Value> out;
  switch (v.kind()) {
    case Value::Kind::undefined:
      return out;
    case Value::Kind::ns:
      for (const auto& [k, x] : v.ns().attrs) out.emplace_back(k);
      return out;
    case Value::Kind::json:
      break;
    default:
      fail(fmt::format("'{}' object is not iterable", type_name(v)), line);
  }
  const Json& j = v.json();
  if (j.is_array()) {
    out.reserve(j.size());
    for (const Json& e : j) out.push_back(v.member(e));
  } else if (j.is_object()) {
    out.reserve(j.size());
    for (const auto& [k, x] : j.items()) out.emplace_back(key_value(k));
  } else if (j.is_string()) {
    for (std::string_view c : code_points(v.str())) out.emplace_back(std::string(c));
  } else {
    fail(fmt::format("'{}' object is not iterable", type_name(v)), line);
  }
  return out;
}

}  // namespace graft::jinja

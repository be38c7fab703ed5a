// Python's arithmetic and membership operators over template values.
#include <cmath>

#include <fmt/format.h>

#include "chat/jinja_operators.h"
#include "chat/jinja_strings.h"

namespace graft::jinja {

namespace {

bool is_numeric(const Value& v) {
  return v.is_number() || v.is_bool();
}
bool is_int_like(const Value& v) {
  return v.is_integer() || v.is_bool();
}

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b, int line) {
  fail(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b)),
       line);
}

Value repeat(const Value& seq, std::int64_t times, int line) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    if (static_cast<double>(seq.str().size()) * static_cast<double>(times) > 64e6)
      fail("string too long", line);
    std::string out;
    for (std::int64_t i = 0; i < times; ++i) out += seq.str();
    return Value(std::move(out));
  }
  if (static_cast<double>(seq.json().size()) * static_cast<double>(times) > 1e6) fail("list too long", line);
  Json out = Json::array();
  for (std::int64_t i = 0; i < times; ++i)
    for (const Json& e : seq.json()) out.push_back(e);
  return Value(std::move(out));
}

}  // namespace

Value arithmetic(Op op, const Value& a, const Value& b, int line) {
  if (is_numeric(a) && is_numeric(b)) {
    bool ints = is_int_like(a) && is_int_like(b);
    if (ints) {
      std::int64_t x = a.as_int(), y = b.as_int(), r = 0;
      bool overflow = false;
      switch (op) {
        case Op::add:
          overflow = __builtin_add_overflow(x, y, &r);
          break;
        case Op::sub:
          overflow = __builtin_sub_overflow(x, y, &r);
          break;
        case Op::mul:
          overflow = __builtin_mul_overflow(x, y, &r);
          break;
        default:
          break;
      }
      if (overflow) fail("integer overflow", line);
      switch (op) {
        case Op::add:
        case Op::sub:
        case Op::mul:
          return Value(r);
        case Op::div:
          if (y == 0) fail("division by zero", line);
          return Value(static_cast<double>(x) / static_cast<double>(y));
        case Op::floordiv: {
          if (y == 0) fail("integer division or modulo by zero", line);
          std::int64_t q = x / y;
          if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
          return Value(q);
        }
        case Op::mod: {
          if (y == 0) fail("integer division or modulo by zero", line);
          std::int64_t m = x % y;
          if (m != 0 && ((m < 0) != (y < 0))) m += y;
          return Value(m);
        }
        case Op::pow: {
          if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
          std::int64_t result = 1;
          for (std::int64_t i = 0; i < y; ++i) {
            if (__builtin_mul_overflow(result, x, &result)) fail("integer overflow", line);
            if (result == 0 || result == 1) break;
          }
          return Value(result);
        }
        default:
          break;
      }
    }
    double x = a.as_double(), y = b.as_double();
    switch (op) {
      case Op::add:
        return Value(x + y);
      case Op::sub:
        return Value(x - y);
      case Op::mul:
        return Value(x * y);
      case Op::div:
        if (y == 0) fail("float division by zero", line);
        return Value(x / y);
      case Op::floordiv:
        if (y == 0) fail("float floor division by zero", line);
        return Value(std::floor(x / y));
      case Op::mod: {
        if (y == 0) fail("float modulo", line);
        double m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value(m);
      }
      case Op::pow:
        return Value(std::pow(x, y));
      default:
        break;
    }
  }
  switch (op) {
    case Op::add:
      if (a.is_string() && b.is_string()) {
        if (a.is_markup() || b.is_markup()) {
          return Value::markup((a.is_markup() ? a.str() : html_escape(a.str())) +
                               (b.is_markup() ? b.str() : html_escape(b.str())));
        }
        return Value(a.str() + b.str());
      }
      if (a.is_array() && b.is_array()) {
        Json out = a.json();
        for (const Json& e : b.json()) out.push_back(e);
        return Value(std::move(out));
      }
      if (a.is_string())
        fail(fmt::format("can only concatenate str (not \"{}\") to str", type_name(b)), line);
      unsupported("+", a, b, line);
    case Op::mul:
      if ((a.is_string() || a.is_array()) && is_int_like(b)) return repeat(a, b.as_int(), line);
      if ((b.is_string() || b.is_array()) && is_int_like(a)) return repeat(b, a.as_int(), line);
      unsupported("*", a, b, line);
    case Op::mod:
      if (a.is_string())
        fail("printf-style string formatting ('%') is not supported; use ~ or format()", line);
      unsupported("%", a, b, line);
    case Op::sub:
      unsupported("-", a, b, line);
    case Op::div:
      unsupported("/", a, b, line);
    case Op::floordiv:
      unsupported("//", a, b, line);
    case Op::pow:
      unsupported("**", a, b, line);
    default:
      fail("bad arithmetic operator", line);
  }
}

bool contains(const Value& container, const Value& item, int line) {
  if (container.is_undefined()) return false;
  if (container.is_string()) {
    if (!item.is_string()) {
      fail(fmt::format("'in <string>' requires string as left operand, not {}", type_name(item)), line);
    }
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_array()) {
    if (!item.is_json()) return false;
    for (const Json& e : container.json())
      if (json_equals(e, item.json())) return true;
    return false;
  }
  if (container.is_object()) {
    std::optional<std::string> key = dict_key(item);
    return key && container.json().contains(*key);
  }
  if (container.is_namespace()) return item.is_string() && container.ns().attrs.count(item.str()) > 0;
  fail(fmt::format("argument of type '{}' is not iterable", type_name(container)), line);
}

}  // namespace graft::jinja

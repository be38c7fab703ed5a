#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "chat/jinja_callable.h"
#include "util/utf8.h"

namespace graft::jinja {

void fail(std::string message, int line) {
  throw TemplateError{std::move(message), line};
}

namespace {

const Json kNull = nullptr;
const Json kTrue = true;
const Json kFalse = false;
const Json kUndefinedName = "value";

std::shared_ptr<const Json> unowned(const Json& j) {
  return std::shared_ptr<const Json>(std::shared_ptr<const Json>(), &j);
}

}  // namespace

Value::Value() : kind_(Kind::undefined), json_(unowned(kUndefinedName)) {}

Value::Value(Json json) : kind_(Kind::json), owned_(true), json_(std::make_shared<Json>(std::move(json))) {}
Value::Value(std::string s) : Value(Json(std::move(s))) {}
Value::Value(const char* s) : Value(Json(s)) {}
Value::Value(bool b) : kind_(Kind::json), json_(unowned(b ? kTrue : kFalse)) {}
Value::Value(std::int64_t i) : Value(Json(i)) {}
Value::Value(double d) : Value(Json(d)) {}
Value::Value(std::shared_ptr<Namespace> ns) : kind_(Kind::ns), object_(std::move(ns)) {}
Value::Value(std::shared_ptr<const Callable> fn)
    : kind_(Kind::callable), object_(std::const_pointer_cast<Callable>(std::move(fn))) {}
Value::Value(std::shared_ptr<LoopState> loop) : kind_(Kind::loop), object_(std::move(loop)) {}

Value Value::undefined(std::string what) {
  Value v;
  v.json_ = std::make_shared<const Json>(std::move(what));
  return v;
}

Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.markup_ = true;
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::json;
  v.json_ = unowned(kNull);
  return v;
}

Value Value::borrowed(const Json& data) {
  Value v;
  v.kind_ = Kind::json;
  v.json_ = unowned(data);
  return v;
}

Value Value::member(const Json& part) const {
  Value v;
  v.kind_ = Kind::json;
  v.owned_ = owned_;
  v.json_ = std::shared_ptr<const Json>(json_, &part);
  return v;
}

std::int64_t Value::as_int() const {
  if (json_->is_boolean()) return json_->get<bool>() ? 1 : 0;
  if (json_->is_number_float()) return static_cast<std::int64_t>(json_->get<double>());
  return json_->get<std::int64_t>();
}

double Value::as_double() const {
  if (json_->is_boolean()) return json_->get<bool>() ? 1.0 : 0.0;
  return json_->get<double>();
}

std::string Value::take_string() {
  if (owned_ && json_.use_count() == 1) return std::move(const_cast<Json&>(*json_).get_ref<std::string&>());
  return str();
}

Json& Value::mutable_json(int line) const {
  if (!is_json() || !owned_) fail("cannot modify a value that came from the request", line);
  return const_cast<Json&>(*json_);  // owned_ means it was allocated non-const
}

Json Value::to_json(int line, int depth) const {
  if (depth > kMaxJsonDepth) fail("value nests too deeply", line);
  switch (kind_) {
    case Kind::json:
      return *json_;
    case Kind::undefined:
      return nullptr;
    case Kind::ns: {
      Json out = Json::object();
      for (const auto& [k, v] : ns().attrs) out[k] = v.to_json(line, depth + 1);
      return out;
    }
    default:
      fail(fmt::format("{} cannot be used as data", type_name(*this)), line);
  }
}

namespace {
constexpr std::string_view kIntKeyMarker = "\x01int:";
}

std::optional<std::string> dict_key(const Value& key) {
  if (key.is_string()) return key.str();
  if (key.is_integer() || key.is_bool()) return std::string(kIntKeyMarker) + std::to_string(key.as_int());
  return std::nullopt;
}

Json key_value(const std::string& stored) {
  if (stored.starts_with(kIntKeyMarker)) {
    return std::stoll(stored.substr(kIntKeyMarker.size()));
  }
  return stored;
}

std::string key_text(const std::string& stored) {
  if (stored.starts_with(kIntKeyMarker)) return stored.substr(kIntKeyMarker.size());
  return stored;
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return false;
    case Value::Kind::json: {
      const Json& j = v.json();
      switch (j.type()) {
        case Json::value_t::null:
          return false;
        case Json::value_t::boolean:
          return j.get<bool>();
        case Json::value_t::number_integer:
          return j.get<std::int64_t>() != 0;
        case Json::value_t::number_unsigned:
          return j.get<std::uint64_t>() != 0;
        case Json::value_t::number_float:
          return j.get<double>() != 0.0;
        case Json::value_t::string:
          return !j.get_ref<const std::string&>().empty();
        case Json::value_t::array:
        case Json::value_t::object:
          return !j.empty();
        default:
          return true;
      }
    }
    default:
      return true;
  }
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+17"
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  std::size_t e = sci.find('e');
  int exponent = std::stoi(sci.substr(e + 1));
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  std::string out;
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out = "0." + std::string(-exponent - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exponent + 1) {
      out = digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
    }
  }
  if (out.empty()) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out.append(1, '.').append(digits, 1);
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  }
  return negative ? "-" + out : out;
}

std::string python_str_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c == static_cast<unsigned char>(quote)) {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
          out += fmt::format("\\x{:02x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += quote;
  return out;
}

namespace {

std::string json_repr(const Json& j, int depth = 0) {
  if (depth > kMaxJsonDepth) fail("value nests too deeply");
  switch (j.type()) {
    case Json::value_t::null:
      return "None";
    case Json::value_t::boolean:
      return j.get<bool>() ? "True" : "False";
    case Json::value_t::number_integer:
      return std::to_string(j.get<std::int64_t>());
    case Json::value_t::number_unsigned:
      return std::to_string(j.get<std::uint64_t>());
    case Json::value_t::number_float:
      return python_float_repr(j.get<double>());
    case Json::value_t::string:
      return python_str_repr(j.get_ref<const std::string&>());
    case Json::value_t::array: {
      std::string out = "[";
      bool first = true;
      for (const Json& e : j) {
        if (!first) out += ", ";
        first = false;
        out += json_repr(e, depth + 1);
      }
      return out + "]";
    }
    case Json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : j.items()) {
        if (!first) out += ", ";
        first = false;
        out += json_repr(key_value(k)) + ": " + json_repr(v, depth + 1);
      }
      return out + "}";
    }
    default:
      return "<binary>";
  }
}

}  // namespace

std::string repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return "";
    case Value::Kind::json:
      return json_repr(v.json());
    case Value::Kind::ns:
      return "<Namespace>";
    case Value::Kind::callable:
      return "<function " + v.callable().name + ">";
    case Value::Kind::loop:
      return "<LoopContext>";
  }
  return "";
}

std::string to_str(const Value& v) {
  if (v.is_string()) return v.str();
  return repr(v);
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return "undefined";
    case Value::Kind::ns:
      return "namespace";
    case Value::Kind::callable:
      return "function";
    case Value::Kind::loop:
      return "loop";
    case Value::Kind::json:
      break;
  }
  switch (v.json().type()) {
    case Json::value_t::null:
      return "none";
    case Json::value_t::boolean:
      return "bool";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "int";
    case Json::value_t::number_float:
      return "float";
    case Json::value_t::string:
      return "str";
    case Json::value_t::array:
      return "list";
    case Json::value_t::object:
      return "dict";
    default:
      return "binary";
  }
}

namespace {

bool equal_at(const Json& a, const Json& b, int depth) {
  if (depth > kMaxJsonDepth) fail("value nests too deeply");
  bool a_num = a.is_number() || a.is_boolean();
  bool b_num = b.is_number() || b.is_boolean();
  if (a_num && b_num) {
    // Python: True == 1 == 1.0
    auto as_double = [](const Json& j) {
      return j.is_boolean() ? (j.get<bool>() ? 1.0 : 0.0) : j.get<double>();
    };
    if ((a.is_number_float() || b.is_number_float())) return as_double(a) == as_double(b);
    auto as_int = [](const Json& j) {
      return j.is_boolean() ? (j.get<bool>() ? 1 : 0) : j.get<std::int64_t>();
    };
    return as_int(a) == as_int(b);
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!equal_at(a[i], b[i], depth + 1)) return false;
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [k, v] : a.items()) {
      auto it = b.find(k);
      if (it == b.end() || !equal_at(v, *it, depth + 1)) return false;
    }
    return true;
  }
  return a == b;
}

}  // namespace

bool json_equals(const Json& a, const Json& b) {
  return equal_at(a, b, 0);
}

bool equals(const Value& a, const Value& b) {
  if (a.is_json() && b.is_json()) return json_equals(a.json(), b.json());
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.kind() != b.kind()) return false;
  if (a.is_namespace()) return &a.ns() == &b.ns();
  if (a.is_callable()) return &a.callable() == &b.callable();
  return &a.loop() == &b.loop();
}

int compare_json(const Json& a, const Json& b, int line, int depth) {
  if (depth > kMaxJsonDepth) fail("value nests too deeply", line);
  bool a_num = a.is_number() || a.is_boolean();
  bool b_num = b.is_number() || b.is_boolean();
  if (a_num && b_num) {
    auto as_double = [](const Json& j) {
      return j.is_boolean() ? (j.get<bool>() ? 1.0 : 0.0) : j.get<double>();
    };
    if (a.is_number_integer() && b.is_number_integer()) {
      auto x = a.get<std::int64_t>(), y = b.get<std::int64_t>();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    double x = as_double(a), y = as_double(b);
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.get_ref<const std::string&>().compare(b.get_ref<const std::string&>());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_array() && b.is_array()) {
    for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (json_equals(a[i], b[i])) continue;
      return compare_json(a[i], b[i], line, depth + 1);
    }
    return a.size() < b.size() ? -1 : (a.size() > b.size() ? 1 : 0);
  }
  fail(fmt::format("cannot compare {} with {}", type_name(Value::borrowed(a)), type_name(Value::borrowed(b))),
       line);
}

int compare(const Value& a, const Value& b, int line) {
  if (!a.is_json() || !b.is_json())
    fail(fmt::format("cannot compare {} with {}", type_name(a), type_name(b)), line);
  return compare_json(a.json(), b.json(), line);
}

std::size_t code_point_count(std::string_view s) {
  return utf8::count_chars(s);
}

std::vector<std::string_view> code_points(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t j = utf8::next_char(s, i);
    out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

std::int64_t length(const Value& v, int line) {
  if (v.is_undefined()) return 0;
  if (v.is_string()) return static_cast<std::int64_t>(code_point_count(v.str()));
  if (v.is_array() || v.is_object()) return static_cast<std::int64_t>(v.json().size());
  if (v.is_namespace()) return static_cast<std::int64_t>(v.ns().attrs.size());
  fail(fmt::format("object of type '{}' has no len()", type_name(v)), line);
}

}  // namespace graft::jinja

// Methods of str, dict and list values (`s.strip()`, `d.get(k)`, `l.append(x)`)
// and slicing.
#include <algorithm>

#include <fmt/format.h>

#include "chat/jinja_interpreter.h"
#include "chat/jinja_strings.h"

namespace graft::jinja {

namespace {

enum class Receiver { str, dict, list };

struct MethodSpec {
  Receiver receiver;
  std::string_view name;
};

constexpr MethodSpec kMethods[] = {
    {Receiver::str, "startswith"}, {Receiver::str, "endswith"},   {Receiver::str, "strip"},
    {Receiver::str, "lstrip"},     {Receiver::str, "rstrip"},     {Receiver::str, "split"},
    {Receiver::str, "rsplit"},     {Receiver::str, "splitlines"}, {Receiver::str, "replace"},
    {Receiver::str, "upper"},      {Receiver::str, "lower"},      {Receiver::str, "title"},
    {Receiver::str, "capitalize"}, {Receiver::str, "find"},       {Receiver::str, "rfind"},
    {Receiver::str, "index"},      {Receiver::str, "count"},      {Receiver::str, "join"},
    {Receiver::str, "format"},     {Receiver::str, "isdigit"},    {Receiver::str, "isalpha"},
    {Receiver::str, "isalnum"},    {Receiver::str, "isspace"},    {Receiver::str, "islower"},
    {Receiver::str, "isupper"},    {Receiver::str, "partition"},  {Receiver::str, "rpartition"},
    {Receiver::dict, "get"},       {Receiver::dict, "items"},     {Receiver::dict, "keys"},
    {Receiver::dict, "values"},    {Receiver::list, "append"},    {Receiver::list, "pop"},
    {Receiver::list, "insert"},    {Receiver::list, "extend"},    {Receiver::list, "index"},
    {Receiver::list, "count"},
};

const std::string& string_arg(const CallArgs& args, std::size_t i, std::string_view method, int line) {
  if (i >= args.positional.size() || !args.positional[i].is_string()) {
    fail(fmt::format("{}() expects a string as argument {}", method, i + 1), line);
  }
  return args.positional[i].str();
}

// An optional argument that may be none: returns null when absent or none.
const Value* optional_arg(const CallArgs& args, std::size_t i, std::string_view name) {
  const Value* v = args.find(i, name);
  return (v && !v->is_none()) ? v : nullptr;
}

std::int64_t int_arg(const Value* v, std::int64_t fallback, std::string_view method, int line) {
  if (!v || v->is_none()) return fallback;
  if (!v->is_integer() && !v->is_bool()) fail(fmt::format("{}() expects an integer", method), line);
  return v->as_int();
}

Value string_list(std::vector<std::string> parts) {
  Json out = Json::array();
  for (std::string& p : parts) out.push_back(std::move(p));
  return Value(std::move(out));
}

Value affix_test(const Value& self, const CallArgs& args, bool prefix, int line) {
  std::string_view name = prefix ? "startswith" : "endswith";
  args.expect(name, 3, {}, line);
  if (args.positional.empty()) fail(fmt::format("{}() takes at least 1 argument", name), line);
  std::string_view s = self.str();
  std::vector<std::string_view> cps;
  if (args.positional.size() > 1) {  // optional start/end, in code points
    cps = code_points(s);
    auto n = static_cast<std::int64_t>(cps.size());
    auto clamp = [&](std::int64_t i) { return std::clamp(i < 0 ? i + n : i, std::int64_t{0}, n); };
    std::int64_t start = clamp(int_arg(&args.positional[1], 0, name, line));
    std::int64_t end = clamp(args.positional.size() > 2 ? int_arg(&args.positional[2], n, name, line) : n);
    if (start >= end) {
      s = {};
    } else {
      const char* first = cps[static_cast<std::size_t>(start)].data();
      const char* last =
          cps[static_cast<std::size_t>(end - 1)].data() + cps[static_cast<std::size_t>(end - 1)].size();
      s = std::string_view(first, static_cast<std::size_t>(last - first));
    }
  }
  auto matches = [&](const Json& candidate) {
    if (!candidate.is_string()) fail(fmt::format("{}() expects a string or a list of strings", name), line);
    const auto& c = candidate.get_ref<const std::string&>();
    if (c.size() > s.size()) return false;
    return prefix ? s.substr(0, c.size()) == c : s.substr(s.size() - c.size()) == c;
  };
  const Value& what = args.positional[0];
  if (what.is_array()) {
    for (const Json& c : what.json())
      if (matches(c)) return Value(true);
    return Value(false);
  }
  if (!what.is_string()) fail(fmt::format("{}() expects a string or a list of strings", name), line);
  return Value(matches(what.json()));
}

// str.format: {} {0} {name}, with {{ and }} escapes; format specs are not supported.
std::string format_string(const std::string& pattern, const CallArgs& args, int line) {
  std::string out;
  std::size_t auto_index = 0;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '{' && i + 1 < pattern.size() && pattern[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < pattern.size() && pattern[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      std::size_t close = pattern.find('}', i);
      if (close == std::string::npos) fail("format(): unmatched '{'", line);
      std::string field = pattern.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!") != std::string::npos)
        fail("format(): format specs are not supported", line);
      const Value* v = nullptr;
      if (field.empty()) {
        v = args.find(auto_index++, "");
      } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
        v = args.find(std::stoul(field), "");
      } else {
        v = args.find(args.positional.size(), field);
      }
      if (!v) fail(fmt::format("format(): no argument for '{{{}}}'", field), line);
      out += to_str(*v);
      i = close;
    } else {
      out += c;
    }
  }
  return out;
}

std::int64_t code_point_offset(std::string_view s, std::size_t byte_offset) {
  return static_cast<std::int64_t>(code_point_count(s.substr(0, byte_offset)));
}

Value call_str_method(Interpreter& in, const Value& self, std::string_view name, const CallArgs& args,
                      int line) {
  const std::string& s = self.str();
  if (name == "startswith" || name == "endswith") return affix_test(self, args, name == "startswith", line);
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    args.expect(name, 1, {}, line);
    const Value* chars = optional_arg(args, 0, "");
    if (chars && !chars->is_string()) fail(fmt::format("{}() arg must be None or str", name), line);
    StripSide side = name == "strip"    ? StripSide::both
                     : name == "lstrip" ? StripSide::left
                                        : StripSide::right;
    return Value(py_strip(s, chars ? &chars->str() : nullptr, side));
  }
  if (name == "split" || name == "rsplit") {
    args.expect(name, 2, {"sep", "maxsplit"}, line);
    const Value* sep = optional_arg(args, 0, "sep");
    if (sep && (!sep->is_string() || sep->str().empty()))
      fail(fmt::format("{}(): bad separator", name), line);
    std::int64_t maxsplit = int_arg(args.find(1, "maxsplit"), -1, name, line);
    return string_list(py_split(s, sep ? &sep->str() : nullptr, maxsplit, name == "rsplit"));
  }
  if (name == "splitlines") return string_list(py_splitlines(s));
  if (name == "replace") {
    args.expect(name, 3, {"count"}, line);
    std::int64_t count = int_arg(args.find(2, "count"), -1, name, line);
    return Value(py_replace(s, string_arg(args, 0, name, line), string_arg(args, 1, name, line), count));
  }
  if (name == "upper") return Value(py_upper(s));
  if (name == "lower") return Value(py_lower(s));
  if (name == "title") return Value(py_title(s));
  if (name == "capitalize") return Value(py_capitalize(s));
  if (name == "find" || name == "rfind" || name == "index") {
    const std::string& sub = string_arg(args, 0, name, line);
    std::size_t at = name == "rfind" ? s.rfind(sub) : s.find(sub);
    if (at == std::string::npos) {
      if (name == "index") fail("substring not found", line);
      return Value(std::int64_t{-1});
    }
    return Value(code_point_offset(s, at));
  }
  if (name == "count") {
    const std::string& sub = string_arg(args, 0, name, line);
    if (sub.empty()) return Value(static_cast<std::int64_t>(code_point_count(s) + 1));
    std::int64_t n = 0;
    for (std::size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
    return Value(n);
  }
  if (name == "join") {
    if (args.positional.size() != 1) fail("join() takes exactly one argument", line);
    std::string out;
    bool first = true;
    for (const Value& item : iterate(args.positional[0], line)) {
      if (!item.is_string())
        fail(fmt::format("join(): expected str instance, {} found", type_name(item)), line);
      if (!first) out += s;
      first = false;
      out += item.str();
    }
    return Value(std::move(out));
  }
  if (name == "format") return Value(format_string(s, args, line));
  if (name == "partition" || name == "rpartition") {
    const std::string& sep = string_arg(args, 0, name, line);
    if (sep.empty()) fail("empty separator", line);
    std::size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
    Json out = Json::array();
    if (at == std::string::npos) {
      out = name == "partition" ? Json::array({s, "", ""}) : Json::array({"", "", s});
    } else {
      out = Json::array({s.substr(0, at), sep, s.substr(at + sep.size())});
    }
    return Value(std::move(out));
  }
  // The is*() predicates, ASCII classes; false for the empty string as in Python.
  auto all_of = [&](auto predicate) {
    return Value(!s.empty() && std::all_of(s.begin(), s.end(),
                                           [&](char c) { return predicate(static_cast<unsigned char>(c)); }));
  };
  if (name == "isdigit") return all_of([](unsigned char c) { return std::isdigit(c) != 0; });
  if (name == "isalpha") return all_of([](unsigned char c) { return std::isalpha(c) != 0 || c >= 0x80; });
  if (name == "isalnum") return all_of([](unsigned char c) { return std::isalnum(c) != 0 || c >= 0x80; });
  if (name == "isspace") {
    auto cps = code_points(s);
    return Value(!cps.empty() && std::all_of(cps.begin(), cps.end(), is_python_space));
  }
  bool has_cased =
      std::any_of(s.begin(), s.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
  if (name == "islower") return Value(has_cased && py_lower(s) == s);
  if (name == "isupper") return Value(has_cased && py_upper(s) == s);
  (void)in;
  fail(fmt::format("'str' object has no attribute '{}'", name), line);
}

Value call_dict_method(const Value& self, std::string_view name, const CallArgs& args, int line) {
  const Json& d = self.json();
  if (name == "get") {
    args.expect(name, 2, {}, line);
    if (args.positional.empty()) fail("get() takes at least 1 argument", line);
    if (std::optional<std::string> key = dict_key(args.positional[0])) {
      auto it = d.find(*key);
      if (it != d.end()) return self.member(*it);
    }
    return args.positional.size() > 1 ? args.positional[1] : Value::none();
  }
  if (name == "items") {
    Json out = Json::array();
    for (const auto& [k, v] : d.items()) out.push_back(Json::array({key_value(k), v}));
    return Value(std::move(out));
  }
  if (name == "keys") {
    Json out = Json::array();
    for (const auto& [k, v] : d.items()) out.push_back(key_value(k));
    return Value(std::move(out));
  }
  Json out = Json::array();  // values
  for (const auto& [k, v] : d.items()) out.push_back(v);
  return Value(std::move(out));
}

Value call_list_method(const Value& self, std::string_view name, const CallArgs& args, int line) {
  if (name == "index" || name == "count") {
    if (args.positional.size() != 1) fail(fmt::format("{}() takes exactly one argument", name), line);
    Json needle = args.positional[0].to_json(line);
    std::int64_t i = 0, n = 0;
    for (const Json& e : self.json()) {
      if (json_equals(e, needle)) {
        if (name == "index") return Value(i);
        ++n;
      }
      ++i;
    }
    if (name == "index") fail("value is not in list", line);
    return Value(n);
  }
  Json& list = self.mutable_json(line);
  if (name == "append") {
    if (args.positional.size() != 1) fail("append() takes exactly one argument", line);
    list.push_back(args.positional[0].to_json(line));
    return Value::none();
  }
  if (name == "extend") {
    if (args.positional.size() != 1) fail("extend() takes exactly one argument", line);
    for (const Value& v : iterate(args.positional[0], line)) list.push_back(v.to_json(line));
    return Value::none();
  }
  if (name == "insert") {
    if (args.positional.size() != 2) fail("insert() takes exactly two arguments", line);
    auto n = static_cast<std::int64_t>(list.size());
    std::int64_t i = int_arg(&args.positional[0], 0, name, line);
    i = std::clamp(i < 0 ? i + n : i, std::int64_t{0}, n);
    list.insert(list.begin() + i, args.positional[1].to_json(line));
    return Value::none();
  }
  // pop
  if (list.empty()) fail("pop from empty list", line);
  auto n = static_cast<std::int64_t>(list.size());
  std::int64_t i = int_arg(args.find(0, ""), -1, name, line);
  if (i < 0) i += n;
  if (i < 0 || i >= n) fail("pop index out of range", line);
  Json item = list[static_cast<std::size_t>(i)];
  list.erase(static_cast<std::size_t>(i));
  return Value(std::move(item));
}

}  // namespace

bool has_method(const Value& object, std::string_view name) {
  if (!object.is_json()) return false;
  Receiver r;
  if (object.is_string())
    r = Receiver::str;
  else if (object.is_object())
    r = Receiver::dict;
  else if (object.is_array())
    r = Receiver::list;
  else
    return false;
  for (const MethodSpec& m : kMethods)
    if (m.receiver == r && m.name == name) return true;
  return false;
}

Value call_method(Interpreter& in, const Value& object, std::string_view name, const CallArgs& args,
                  int line) {
  if (!has_method(object, name))
    fail(fmt::format("'{}' object has no method '{}'", type_name(object), name), line);
  if (object.is_string()) return call_str_method(in, object, name, args, line);
  if (object.is_object()) return call_dict_method(object, name, args, line);
  return call_list_method(object, name, args, line);
}

Value slice(const Value& object, const Value& start_v, const Value& stop_v, const Value& step_v, int line) {
  if (!object.is_array() && !object.is_string()) {
    if (object.is_undefined()) fail(object.undefined_what(), line);
    fail(fmt::format("'{}' object is not subscriptable", type_name(object)), line);
  }
  auto bound = [&](const Value& v) -> const Value* {
    if (v.is_none() || v.is_undefined()) return nullptr;
    if (!v.is_integer() && !v.is_bool()) fail("slice indices must be integers or None", line);
    return &v;
  };
  std::vector<std::string_view> chars;
  if (object.is_string()) chars = code_points(object.str());
  auto n = static_cast<std::int64_t>(object.is_string() ? chars.size() : object.json().size());
  std::int64_t step = bound(step_v) ? step_v.as_int() : 1;
  if (step == 0) fail("slice step cannot be zero", line);
  // Python's slice index adjustment.
  auto adjust = [&](const Value& v, std::int64_t fallback) {
    if (!bound(v)) return fallback;
    std::int64_t i = v.as_int();
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  std::int64_t start = adjust(start_v, step < 0 ? n - 1 : 0);
  std::int64_t stop = adjust(stop_v, step < 0 ? -1 : n);
  if (object.is_string()) {
    std::string out;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
      out += chars[static_cast<std::size_t>(i)];
    return Value(std::move(out));
  }
  Json out = Json::array();
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    out.push_back(object.json()[static_cast<std::size_t>(i)]);
  }
  return Value(std::move(out));
}

}  // namespace graft::jinja

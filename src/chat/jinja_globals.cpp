// The tests (`x is name`) and the global functions (range, namespace, dict,
// raise_exception, strftime_now, joiner).
#include <ctime>
#include <unordered_map>

#include <fmt/format.h>

#include "chat/jinja_interpreter.h"
#include "chat/jinja_operators.h"
#include "chat/jinja_strings.h"

namespace graft::jinja {

namespace {

using TestFn = bool (*)(const Value&, const CallArgs&, int);

const Value& test_arg(const CallArgs& args, std::string_view test, int line) {
  if (args.positional.empty()) fail(fmt::format("the '{}' test needs an argument", test), line);
  return args.positional[0];
}

bool same_as(const Value& a, const Value& b) {
  if (a.is_json() && b.is_json()) {
    const Json& x = a.json();
    const Json& y = b.json();
    if (x.is_null() || x.is_boolean()) return x.type() == y.type() && x == y;  // singletons
    return &x == &y;
  }
  return equals(a, b);
}

bool has_cased_letters(const std::string& s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
}

const std::unordered_map<std::string_view, TestFn>& tests() {
  static const std::unordered_map<std::string_view, TestFn> table = {
      {"defined", [](const Value& v, const CallArgs&, int) { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, const CallArgs&, int) { return v.is_undefined(); }},
      {"none", [](const Value& v, const CallArgs&, int) { return v.is_none(); }},
      {"boolean", [](const Value& v, const CallArgs&, int) { return v.is_bool(); }},
      {"true", [](const Value& v, const CallArgs&, int) { return v.is_bool() && v.json().get<bool>(); }},
      {"false", [](const Value& v, const CallArgs&, int) { return v.is_bool() && !v.json().get<bool>(); }},
      {"integer", [](const Value& v, const CallArgs&, int) { return v.is_integer(); }},
      {"float",
       [](const Value& v, const CallArgs&, int) { return v.is_json() && v.json().is_number_float(); }},
      {"number", [](const Value& v, const CallArgs&, int) { return v.is_number() || v.is_bool(); }},
      {"string", [](const Value& v, const CallArgs&, int) { return v.is_string(); }},
      {"mapping", [](const Value& v, const CallArgs&, int) { return v.is_object(); }},
      // jinja2's Undefined is iterable (and empty), so these are true for it too.
      {"iterable", [](const Value& v, const CallArgs&,
                      int) { return v.is_undefined() || v.is_string() || v.is_array() || v.is_object(); }},
      {"sequence", [](const Value& v, const CallArgs&,
                      int) { return v.is_undefined() || v.is_string() || v.is_array() || v.is_object(); }},
      {"callable", [](const Value& v, const CallArgs&, int) { return v.is_callable(); }},
      {"sameas",
       [](const Value& v, const CallArgs& a, int l) { return same_as(v, test_arg(a, "sameas", l)); }},
      {"eq", [](const Value& v, const CallArgs& a, int l) { return equals(v, test_arg(a, "eq", l)); }},
      {"equalto",
       [](const Value& v, const CallArgs& a, int l) { return equals(v, test_arg(a, "equalto", l)); }},
      {"==", [](const Value& v, const CallArgs& a, int l) { return equals(v, test_arg(a, "==", l)); }},
      {"ne", [](const Value& v, const CallArgs& a, int l) { return !equals(v, test_arg(a, "ne", l)); }},
      {"!=", [](const Value& v, const CallArgs& a, int l) { return !equals(v, test_arg(a, "!=", l)); }},
      {"lt",
       [](const Value& v, const CallArgs& a, int l) { return compare(v, test_arg(a, "lt", l), l) < 0; }},
      {"lessthan", [](const Value& v, const CallArgs& a,
                      int l) { return compare(v, test_arg(a, "lessthan", l), l) < 0; }},
      {"<", [](const Value& v, const CallArgs& a, int l) { return compare(v, test_arg(a, "<", l), l) < 0; }},
      {"le",
       [](const Value& v, const CallArgs& a, int l) { return compare(v, test_arg(a, "le", l), l) <= 0; }},
      {"<=",
       [](const Value& v, const CallArgs& a, int l) { return compare(v, test_arg(a, "<=", l), l) <= 0; }},
      {"gt",
       [](const Value& v, const CallArgs& a, int l) { return compare(v, test_arg(a, "gt", l), l) > 0; }},
      {"greaterthan", [](const Value& v, const CallArgs& a,
                         int l) { return compare(v, test_arg(a, "greaterthan", l), l) > 0; }},
      {">", [](const Value& v, const CallArgs& a, int l) { return compare(v, test_arg(a, ">", l), l) > 0; }},
      {"ge",
       [](const Value& v, const CallArgs& a, int l) { return compare(v, test_arg(a, "ge", l), l) >= 0; }},
      {">=",
       [](const Value& v, const CallArgs& a, int l) { return compare(v, test_arg(a, ">=", l), l) >= 0; }},
      {"in", [](const Value& v, const CallArgs& a, int l) { return contains(test_arg(a, "in", l), v, l); }},
      {"divisibleby",
       [](const Value& v, const CallArgs& a, int l) {
         const Value& n = test_arg(a, "divisibleby", l);
         if (!v.is_number() || !n.is_number()) fail("divisibleby expects numbers", l);
         if (n.as_double() == 0) fail("divisibleby: division by zero", l);
         return std::fmod(v.as_double(), n.as_double()) == 0;
       }},
      {"even",
       [](const Value& v, const CallArgs&, int l) {
         if (!v.is_integer()) fail("the 'even' test expects an integer", l);
         return v.as_int() % 2 == 0;
       }},
      {"odd",
       [](const Value& v, const CallArgs&, int l) {
         if (!v.is_integer()) fail("the 'odd' test expects an integer", l);
         return v.as_int() % 2 != 0;
       }},
      {"lower",
       [](const Value& v, const CallArgs&, int) {
         return v.is_string() && has_cased_letters(v.str()) && py_lower(v.str()) == v.str();
       }},
      {"upper",
       [](const Value& v, const CallArgs&, int) {
         return v.is_string() && has_cased_letters(v.str()) && py_upper(v.str()) == v.str();
       }},
      {"escaped", [](const Value&, const CallArgs&, int) { return false; }},
      {"filter",
       [](const Value& v, const CallArgs&, int) { return v.is_string() && is_known_filter(v.str()); }},
      {"test", [](const Value& v, const CallArgs&, int) { return v.is_string() && is_known_test(v.str()); }},
  };
  return table;
}

// --- global functions ---

using FunctionFn = Value (*)(Interpreter&, const CallArgs&, int);

struct BuiltinFunction : Callable {
  FunctionFn fn;
  BuiltinFunction(std::string n, FunctionFn f) : Callable(std::move(n)), fn(f) {}
  Value call(Interpreter& in, const CallArgs& args, int line) const override { return fn(in, args, line); }
};

Value fn_range(Interpreter& in, const CallArgs& args, int line) {
  args.expect("range", 3, {}, line);
  std::vector<std::int64_t> a;
  for (const Value& v : args.positional) {
    if (!v.is_integer() && !v.is_bool())
      fail(fmt::format("range() expects integers, got {}", type_name(v)), line);
    a.push_back(v.as_int());
  }
  if (a.empty()) fail("range expected at least 1 argument, got 0", line);
  std::int64_t start = a.size() > 1 ? a[0] : 0;
  std::int64_t stop = a.size() > 1 ? a[1] : a[0];
  std::int64_t step = a.size() > 2 ? a[2] : 1;
  if (step == 0) fail("range() arg 3 must not be zero", line);
  double count =
      std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step));
  if (count > 0) in.count_steps(static_cast<std::int64_t>(count), line);
  Json out = Json::array();
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(i);
  return Value(std::move(out));
}

Value fn_namespace(Interpreter& in, const CallArgs& args, int line) {
  auto ns = std::make_shared<Namespace>();
  in.track(ns);
  for (const Value& init : args.positional) {
    if (!init.is_object()) fail("namespace() takes a dict or keyword arguments", line);
    for (const auto& [k, v] : init.json().items()) ns->attrs[k] = init.member(v);
  }
  for (const auto& [k, v] : args.keyword) ns->attrs[k] = v;
  return Value(std::move(ns));
}

Value fn_dict(Interpreter&, const CallArgs& args, int line) {
  Json out = Json::object();
  for (const Value& init : args.positional) {
    if (!init.is_object()) fail("dict() takes a dict or keyword arguments", line);
    for (const auto& [k, v] : init.json().items()) out[k] = v;
  }
  for (const auto& [k, v] : args.keyword) out[k] = v.to_json(line);
  return Value(std::move(out));
}

Value fn_raise_exception(Interpreter&, const CallArgs& args, int line) {
  std::string message =
      args.positional.empty() ? "the template raised an exception" : to_str(args.positional[0]);
  fail(std::move(message), line);
}

Value fn_strftime_now(Interpreter& in, const CallArgs& args, int line) {
  if (args.positional.size() != 1 || !args.positional[0].is_string())
    fail("strftime_now() expects a format string", line);
  std::time_t t = std::chrono::system_clock::to_time_t(in.now());
  std::tm local{};
  localtime_r(&t, &local);
  char buf[256];
  std::size_t n = std::strftime(buf, sizeof buf, args.positional[0].str().c_str(), &local);
  return Value(std::string(buf, n));
}

// joiner(sep): a function that returns "" the first time and sep after.
struct Joiner : Callable {
  std::string separator;
  mutable bool used = false;
  explicit Joiner(std::string sep) : Callable("joiner"), separator(std::move(sep)) {}
  Value call(Interpreter&, const CallArgs&, int) const override {
    if (!used) {
      used = true;
      return Value("");
    }
    return Value(separator);
  }
};

Value fn_joiner(Interpreter&, const CallArgs& args, int) {
  const Value* sep = args.find(0, "sep");
  return Value(std::make_shared<const Joiner>(sep ? to_str(*sep) : ", "));
}

const std::unordered_map<std::string_view, Value>& functions() {
  static const std::unordered_map<std::string_view, Value> table = [] {
    std::unordered_map<std::string_view, Value> t;
    auto add = [&](std::string_view name, FunctionFn fn) {
      t.emplace(name, Value(std::make_shared<const BuiltinFunction>(std::string(name), fn)));
    };
    add("range", fn_range);
    add("namespace", fn_namespace);
    add("dict", fn_dict);
    add("raise_exception", fn_raise_exception);
    add("strftime_now", fn_strftime_now);
    add("joiner", fn_joiner);
    return t;
  }();
  return table;
}

}  // namespace

bool is_known_test(std::string_view name) {
  return tests().count(name) > 0;
}

bool call_test(Interpreter&, std::string_view name, const Value& input, const CallArgs& args, int line) {
  auto it = tests().find(name);
  if (it == tests().end()) fail(fmt::format("unknown test '{}'", name), line);
  return it->second(input, args, line);
}

const Value* find_global_function(std::string_view name) {
  auto it = functions().find(name);
  return it == functions().end() ? nullptr : &it->second;
}

}  // namespace graft::jinja

// The filters (`x | name(args)`): jinja2's built-ins that chat templates use,
// Hugging Face's `tojson`, and `from_json`.
#include <algorithm>
#include <cmath>
#include <functional>
#include <unordered_map>

#include <fmt/format.h>

#include "chat/jinja_interpreter.h"
#include "chat/jinja_strings.h"

namespace graft::jinja {

namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, const CallArgs&, int);

const Value* arg(const CallArgs& args, std::size_t i, std::string_view name) {
  const Value* v = args.find(i, name);
  return (v && !v->is_undefined()) ? v : nullptr;
}

bool bool_arg(const CallArgs& args, std::size_t i, std::string_view name, bool fallback) {
  const Value* v = arg(args, i, name);
  return v ? truthy(*v) : fallback;
}

const std::string& require_string(const Value& v, std::string_view filter, int line) {
  if (!v.is_string())
    fail(fmt::format("the '{}' filter expects a string, got {}", filter, type_name(v)), line);
  return v.str();
}

// Undefined prints as "", everything else as Python's str().
std::string text_of(const Value& v) {
  return v.is_undefined() ? "" : to_str(v);
}

Value list_of(const std::vector<Value>& items, int line) {
  Json out = Json::array();
  for (const Value& v : items) out.push_back(v.to_json(line));
  return Value(std::move(out));
}

// jinja2's attribute getter: "a.b.0" walks attributes and items.
Value get_path(const Value& item, const std::string& path, int line) {
  Value current = item;
  std::size_t start = 0;
  while (true) {
    std::size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (current.is_undefined()) return current;
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    current = numeric ? get_item(current, Value(static_cast<std::int64_t>(std::stoll(part))), line)
                      : get_item(current, Value(part), line);
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

// Sort key handling shared by sort, dictsort, unique, min and max.
Value fold_case(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.str()));
  return v;
}

Value f_abs(Interpreter&, const Value& in, const CallArgs&, int line) {
  if (in.is_integer()) return Value(in.as_int() < 0 ? -in.as_int() : in.as_int());
  if (in.is_number()) return Value(std::fabs(in.as_double()));
  fail(fmt::format("bad operand type for abs(): '{}'", type_name(in)), line);
}

Value f_attr(Interpreter&, const Value& in, const CallArgs& args, int line) {
  const Value* name = arg(args, 0, "name");
  if (!name || !name->is_string()) fail("attr() expects an attribute name", line);
  return get_attribute(in, name->str(), line);
}

Value f_capitalize(Interpreter&, const Value& in, const CallArgs&, int) {
  return Value(py_capitalize(text_of(in)));
}

Value f_default(Interpreter&, const Value& in, const CallArgs& args, int) {
  bool use_default = in.is_undefined() || (bool_arg(args, 1, "boolean", false) && !truthy(in));
  if (!use_default) return in;
  const Value* d = args.find(0, "default_value");
  return d ? *d : Value("");
}

Value f_dictsort(Interpreter&, const Value& in, const CallArgs& args, int line) {
  if (!in.is_object()) fail(fmt::format("dictsort expects a dict, got {}", type_name(in)), line);
  bool case_sensitive = bool_arg(args, 0, "case_sensitive", false);
  const Value* by = arg(args, 1, "by");
  bool by_value = by && by->is_string() && by->str() == "value";
  bool reverse = bool_arg(args, 2, "reverse", false);
  std::vector<std::pair<Value, Value>> pairs;
  for (const auto& [k, v] : in.json().items()) pairs.emplace_back(Value(key_value(k)), in.member(v));
  std::stable_sort(pairs.begin(), pairs.end(), [&](const auto& a, const auto& b) {
    const Value& x = by_value ? a.second : a.first;
    const Value& y = by_value ? b.second : b.first;
    int c = compare(fold_case(x, case_sensitive), fold_case(y, case_sensitive), line);
    return reverse ? c > 0 : c < 0;
  });
  Json out = Json::array();
  for (const auto& [k, v] : pairs) out.push_back(Json::array({k.json(), v.json()}));
  return Value(std::move(out));
}

Value f_escape(Interpreter&, const Value& in, const CallArgs&, int) {
  return in.is_markup() ? in : Value::markup(html_escape(text_of(in)));
}

Value f_first(Interpreter&, const Value& in, const CallArgs&, int line) {
  std::vector<Value> items = iterate(in, line);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(Interpreter&, const Value& in, const CallArgs&, int line) {
  std::vector<Value> items = iterate(in, line);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_float(Interpreter&, const Value& in, const CallArgs& args, int) {
  const Value* d = arg(args, 0, "default");
  Value fallback = d ? *d : Value(0.0);
  if (in.is_number() || in.is_bool()) return Value(in.as_double());
  if (in.is_string()) {
    try {
      std::size_t used = 0;
      double v = std::stod(in.str(), &used);
      if (used == in.str().size()) return Value(v);
    } catch (...) {
    }
  }
  return fallback;
}

Value f_from_json(Interpreter&, const Value& in, const CallArgs&, int line) {
  const std::string& text = require_string(in, "from_json", line);
  Json parsed = Json::parse(text, nullptr, false);
  if (parsed.is_discarded()) fail("from_json: the string is not valid JSON", line);
  return Value(std::move(parsed));
}

Value f_indent(Interpreter&, const Value& in, const CallArgs& args, int line) {
  const Value* width = arg(args, 0, "width");
  std::string indention = "    ";
  if (width && width->is_string())
    indention = width->str();
  else if (width && (width->is_integer() || width->is_bool()))
    indention = std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, width->as_int())), ' ');
  else if (width)
    fail("indent() width must be an integer or a string", line);
  bool first = bool_arg(args, 1, "first", false);
  bool blank = bool_arg(args, 2, "blank", false);
  std::vector<std::string> lines = py_splitlines(text_of(in) + "\n");
  std::string out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += '\n';
      if (blank || !lines[i].empty()) out += indention;
    }
    out += lines[i];
  }
  if (first) out = indention + out;
  return Value(std::move(out));
}

Value f_int(Interpreter&, const Value& in, const CallArgs& args, int) {
  const Value* d = arg(args, 0, "default");
  Value fallback = d ? *d : Value(std::int64_t{0});
  if (in.is_integer() || in.is_bool()) return Value(in.as_int());
  if (in.is_number()) return Value(static_cast<std::int64_t>(std::trunc(in.as_double())));
  if (in.is_string()) {
    std::string s = py_strip(in.str(), nullptr, StripSide::both);
    try {
      std::size_t used = 0;
      long long v = std::stoll(s, &used, 10);
      if (used == s.size()) return Value(static_cast<std::int64_t>(v));
      double f = std::stod(s, &used);
      if (used == s.size()) return Value(static_cast<std::int64_t>(std::trunc(f)));
    } catch (...) {
    }
  }
  return fallback;
}

Value f_items(Interpreter&, const Value& in, const CallArgs&, int line) {
  if (in.is_undefined()) return Value(Json::array());
  if (in.is_namespace()) {
    Json out = Json::array();
    for (const auto& [k, v] : in.ns().attrs) out.push_back(Json::array({k, v.to_json(line)}));
    return Value(std::move(out));
  }
  if (!in.is_object()) fail(fmt::format("the 'items' filter expects a dict, got {}", type_name(in)), line);
  Json out = Json::array();
  for (const auto& [k, v] : in.json().items()) out.push_back(Json::array({key_value(k), v}));
  return Value(std::move(out));
}

Value f_join(Interpreter&, const Value& in, const CallArgs& args, int line) {
  const Value* sep = arg(args, 0, "d");
  const Value* attribute = arg(args, 1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& item : iterate(in, line)) {
    if (!first) out += sep ? text_of(*sep) : "";
    first = false;
    out += text_of(attribute ? get_path(item, to_str(*attribute), line) : item);
  }
  return Value(std::move(out));
}

Value f_length(Interpreter&, const Value& in, const CallArgs&, int line) {
  return Value(length(in, line));
}

Value f_list(Interpreter&, const Value& in, const CallArgs&, int line) {
  return list_of(iterate(in, line), line);
}

Value f_lower(Interpreter&, const Value& in, const CallArgs&, int) {
  return Value(py_lower(text_of(in)));
}
Value f_upper(Interpreter&, const Value& in, const CallArgs&, int) {
  return Value(py_upper(text_of(in)));
}
Value f_title(Interpreter&, const Value& in, const CallArgs&, int) {
  return Value(py_title(text_of(in)));
}

Value f_map(Interpreter& interp, const Value& in, const CallArgs& args, int line) {
  std::vector<Value> out;
  if (!truthy(in)) return list_of(out, line);  // jinja2 maps nothing over none
  const Value* attribute = nullptr;
  for (const auto& [k, v] : args.keyword)
    if (k == "attribute") attribute = &v;
  if (attribute) {
    const Value* fallback = nullptr;
    for (const auto& [k, v] : args.keyword)
      if (k == "default") fallback = &v;
    for (const Value& item : iterate(in, line)) {
      Value v = get_path(item, to_str(*attribute), line);
      out.push_back(v.is_undefined() && fallback ? *fallback : v);
    }
    return list_of(out, line);
  }
  if (args.positional.empty() || !args.positional[0].is_string())
    fail("map() expects a filter name or attribute=", line);
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : iterate(in, line))
    out.push_back(interp.apply_filter(args.positional[0].str(), item, rest, line));
  return list_of(out, line);
}

Value select_items(Interpreter& interp, const Value& in, const CallArgs& args, int line, bool by_attribute,
                   bool keep) {
  if (!truthy(in)) return Value(Json::array());  // jinja2 selects nothing from none
  std::size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    if (args.positional.empty()) fail("selectattr/rejectattr expect an attribute name", line);
    attribute = to_str(args.positional[next++]);
  }
  std::string test;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string()) fail("select/reject expect a test name", line);
    test = args.positional[next++].str();
  }
  CallArgs test_args;
  test_args.positional.assign(
      args.positional.begin() + static_cast<std::ptrdiff_t>(std::min(next, args.positional.size())),
      args.positional.end());
  std::vector<Value> out;
  for (const Value& item : iterate(in, line)) {
    Value subject = by_attribute ? get_path(item, attribute, line) : item;
    bool passed = test.empty() ? truthy(subject) : interp.apply_test(test, subject, test_args, line);
    if (passed == keep) out.push_back(item);
  }
  return list_of(out, line);
}

Value f_select(Interpreter& i, const Value& in, const CallArgs& a, int l) {
  return select_items(i, in, a, l, false, true);
}
Value f_reject(Interpreter& i, const Value& in, const CallArgs& a, int l) {
  return select_items(i, in, a, l, false, false);
}
Value f_selectattr(Interpreter& i, const Value& in, const CallArgs& a, int l) {
  return select_items(i, in, a, l, true, true);
}
Value f_rejectattr(Interpreter& i, const Value& in, const CallArgs& a, int l) {
  return select_items(i, in, a, l, true, false);
}

Value extreme(const Value& in, const CallArgs& args, int line, bool want_max) {
  bool case_sensitive = bool_arg(args, 0, "case_sensitive", false);
  const Value* attribute = arg(args, 1, "attribute");
  std::vector<Value> items = iterate(in, line);
  if (items.empty())
    return Value::undefined(want_max ? "No largest item, sequence was empty."
                                     : "No smallest item, sequence was empty.");
  std::size_t best = 0;
  auto key = [&](const Value& v) {
    return fold_case(attribute ? get_path(v, to_str(*attribute), line) : v, case_sensitive);
  };
  for (std::size_t i = 1; i < items.size(); ++i) {
    int c = compare(key(items[i]), key(items[best]), line);
    if (want_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}

Value f_max(Interpreter&, const Value& in, const CallArgs& args, int line) {
  return extreme(in, args, line, true);
}
Value f_min(Interpreter&, const Value& in, const CallArgs& args, int line) {
  return extreme(in, args, line, false);
}

Value f_replace(Interpreter&, const Value& in, const CallArgs& args, int line) {
  const Value* old_text = arg(args, 0, "old");
  const Value* new_text = arg(args, 1, "new");
  if (!old_text || !new_text) fail("replace() expects two arguments", line);
  const Value* count = arg(args, 2, "count");
  std::int64_t n = (count && !count->is_none()) ? count->as_int() : -1;
  return Value(py_replace(text_of(in), to_str(*old_text), to_str(*new_text), n));
}

Value f_reverse(Interpreter&, const Value& in, const CallArgs&, int line) {
  std::vector<Value> items = iterate(in, line);
  std::reverse(items.begin(), items.end());
  if (in.is_string()) {
    std::string out;
    for (const Value& c : items) out += c.str();
    return Value(std::move(out));
  }
  return list_of(items, line);
}

Value f_round(Interpreter&, const Value& in, const CallArgs& args, int line) {
  if (!in.is_number() && !in.is_bool()) fail("round() expects a number", line);
  const Value* precision = arg(args, 0, "precision");
  const Value* method = arg(args, 1, "method");
  std::int64_t digits = precision ? precision->as_int() : 0;
  std::string how = method ? to_str(*method) : "common";
  double scale = std::pow(10.0, static_cast<double>(digits));
  double x = in.as_double() * scale;
  if (how == "ceil")
    x = std::ceil(x);
  else if (how == "floor")
    x = std::floor(x);
  else
    x = std::round(x);
  return Value(x / scale);
}

Value f_safe(Interpreter&, const Value& in, const CallArgs&, int) {
  return in.is_string() ? Value::markup(in.str()) : in;
}

Value f_sort(Interpreter&, const Value& in, const CallArgs& args, int line) {
  bool reverse = bool_arg(args, 0, "reverse", false);
  bool case_sensitive = bool_arg(args, 1, "case_sensitive", false);
  const Value* attribute = arg(args, 2, "attribute");
  std::vector<Value> items = iterate(in, line);
  auto key = [&](const Value& v) {
    return fold_case(attribute ? get_path(v, to_str(*attribute), line) : v, case_sensitive);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    int c = compare(key(a), key(b), line);
    return reverse ? c > 0 : c < 0;
  });
  return list_of(items, line);
}

Value f_string(Interpreter&, const Value& in, const CallArgs&, int) {
  return Value(text_of(in));
}

Value f_sum(Interpreter&, const Value& in, const CallArgs& args, int line) {
  const Value* attribute = arg(args, 0, "attribute");
  const Value* start = arg(args, 1, "start");
  Value total = start ? *start : Value(std::int64_t{0});
  for (const Value& item : iterate(in, line)) {
    Value v = attribute ? get_path(item, to_str(*attribute), line) : item;
    if ((!v.is_number() && !v.is_bool()) || (!total.is_number() && !total.is_bool()))
      fail("sum() expects numbers", line);
    if (total.is_integer() && (v.is_integer() || v.is_bool()))
      total = Value(total.as_int() + v.as_int());
    else
      total = Value(total.as_double() + v.as_double());
  }
  return total;
}

// Hugging Face's tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value f_tojson(Interpreter&, const Value& in, const CallArgs& args, int line) {
  if (in.is_undefined()) fail("Object of type Undefined is not JSON serializable", line);
  DumpOptions o;
  o.ensure_ascii = bool_arg(args, 0, "ensure_ascii", false);
  const Value* indent = arg(args, 1, "indent");
  if (indent && !indent->is_none()) {
    if (indent->is_string()) {
      o.indent_text = indent->str();
      o.indent = 0;
    } else if (indent->is_integer()) {
      o.indent = static_cast<int>(std::max<std::int64_t>(0, indent->as_int()));
    } else {
      fail("tojson(): indent must be an integer or a string", line);
    }
    o.item_separator.resize(1);  // "," (an assignment from a literal trips a gcc 12 false warning)
  }
  const Value* separators = arg(args, 2, "separators");
  if (separators && !separators->is_none()) {
    std::vector<Value> parts = iterate(*separators, line);
    if (parts.size() != 2 || !parts[0].is_string() || !parts[1].is_string()) {
      fail("tojson(): separators must be a pair of strings", line);
    }
    o.item_separator = parts[0].str();
    o.key_separator = parts[1].str();
  }
  o.sort_keys = bool_arg(args, 3, "sort_keys", false);
  return Value(dump_json(in.to_json(line), o));
}

Value f_trim(Interpreter&, const Value& in, const CallArgs& args, int line) {
  const Value* chars = arg(args, 0, "chars");
  if (chars && !chars->is_none() && !chars->is_string()) fail("trim() chars must be a string", line);
  return Value(
      py_strip(text_of(in), (chars && chars->is_string()) ? &chars->str() : nullptr, StripSide::both));
}

Value f_unique(Interpreter&, const Value& in, const CallArgs& args, int line) {
  bool case_sensitive = bool_arg(args, 0, "case_sensitive", false);
  const Value* attribute = arg(args, 1, "attribute");
  std::vector<Value> out, seen;
  for (const Value& item : iterate(in, line)) {
    Value key = fold_case(attribute ? get_path(item, to_str(*attribute), line) : item, case_sensitive);
    bool duplicate = std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); });
    if (duplicate) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return list_of(out, line);
}

Value f_wordcount(Interpreter&, const Value& in, const CallArgs&, int) {
  return Value(static_cast<std::int64_t>(py_split(text_of(in), nullptr, -1, false).size()));
}

const std::unordered_map<std::string_view, FilterFn>& filters() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"abs", f_abs},
      {"attr", f_attr},
      {"capitalize", f_capitalize},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"from_json", f_from_json},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", f_lower},
      {"map", f_map},
      {"max", f_max},
      {"min", f_min},
      {"reject", f_reject},
      {"rejectattr", f_rejectattr},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", f_safe},
      {"select", f_select},
      {"selectattr", f_selectattr},
      {"sort", f_sort},
      {"string", f_string},
      {"sum", f_sum},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"unique", f_unique},
      {"upper", f_upper},
      {"wordcount", f_wordcount},
  };
  return table;
}

}  // namespace

bool is_known_filter(std::string_view name) {
  return filters().count(name) > 0;
}

Value call_filter(Interpreter& in, std::string_view name, const Value& input, const CallArgs& args,
                  int line) {
  auto it = filters().find(name);
  if (it == filters().end()) fail(fmt::format("unknown filter '{}'", name), line);
  return it->second(in, input, args, line);
}

}  // namespace graft::jinja

// The values a chat template computes with: JSON data (shared, never copied
// when read), plus the few things JSON cannot hold (undefined, namespace
// objects, macros and other callables, the `loop` object).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace graft::jinja {

// Insertion-ordered like a Python dict, so `tojson` and `items()` keep the
// key order of the request.
using Json = nlohmann::ordered_json;

class Value;
struct Namespace;
struct Callable;
struct LoopState;

// A template error; the interpreter turns it into a graft Error with the line.
struct TemplateError {
  std::string message;
  int line = 0;
};

[[noreturn]] void fail(std::string message, int line = 0);

// Deeper JSON is refused rather than recursed into.
constexpr int kMaxJsonDepth = 512;

class Value {
 public:
  enum class Kind : std::uint8_t { undefined, json, ns, callable, loop };

  Value();                // undefined
  Value(Json json);       // NOLINT(implicit): owned, may be mutated by append/pop
  Value(std::string s);   // NOLINT(implicit)
  Value(const char* s);   // NOLINT(implicit)
  Value(bool b);          // NOLINT(implicit)
  Value(std::int64_t i);  // NOLINT(implicit)
  Value(int i) : Value(static_cast<std::int64_t>(i)) {}  // NOLINT(implicit)
  Value(double d);                                       // NOLINT(implicit)
  explicit Value(std::shared_ptr<Namespace> ns);
  explicit Value(std::shared_ptr<const Callable> fn);
  explicit Value(std::shared_ptr<LoopState> loop);

  // `what` names the missing thing for error messages ("'x' is undefined").
  static Value undefined(std::string what);
  static Value none();
  // Read-only view of data that outlives the render (the request's messages).
  static Value borrowed(const Json& data);
  // A part of this value's JSON (an element or member), sharing its owner.
  Value member(const Json& part) const;
  // A string marked safe (jinja2's Markup, made by `|safe` and `|escape`):
  // adding a plain string to it HTML-escapes the plain string, as in jinja2.
  static Value markup(std::string s);
  bool is_markup() const { return markup_; }

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::undefined; }
  bool is_json() const { return kind_ == Kind::json; }
  bool is_none() const { return is_json() && json_->is_null(); }
  bool is_string() const { return is_json() && json_->is_string(); }
  bool is_bool() const { return is_json() && json_->is_boolean(); }
  bool is_integer() const { return is_json() && json_->is_number_integer(); }
  bool is_number() const { return is_json() && json_->is_number(); }
  bool is_array() const { return is_json() && json_->is_array(); }
  bool is_object() const { return is_json() && json_->is_object(); }
  bool is_namespace() const { return kind_ == Kind::ns; }
  bool is_callable() const { return kind_ == Kind::callable; }

  const Json& json() const { return *json_; }
  const std::string& str() const { return json_->get_ref<const std::string&>(); }
  std::int64_t as_int() const;
  double as_double() const;
  // The string, moved out when this Value is its only owner (a temporary such
  // as the left side of a chain of `~`), copied otherwise.
  std::string take_string();
  // The JSON for in-place list methods; fails unless the template built it.
  Json& mutable_json(int line) const;

  Namespace& ns() const { return *static_cast<Namespace*>(object_.get()); }
  const Callable& callable() const { return *static_cast<const Callable*>(object_.get()); }
  LoopState& loop() const { return *static_cast<LoopState*>(object_.get()); }
  const std::string& undefined_what() const { return json_->get_ref<const std::string&>(); }

  // The value as JSON data (namespaces and callables cannot be; undefined
  // becomes null inside lists and dicts as jinja2 would print it).
  Json to_json(int line, int depth = 0) const;

 private:
  Kind kind_ = Kind::undefined;
  bool owned_ = false;
  bool markup_ = false;
  std::shared_ptr<const Json> json_;  // the data, or the undefined name
  std::shared_ptr<void> object_;      // Namespace, Callable or LoopState
};

// A mutable attribute bag made by `namespace(...)`.
struct Namespace {
  std::map<std::string, Value, std::less<>> attrs;
};

// Python semantics over values.
bool truthy(const Value& v);
std::string to_str(const Value& v);     // Python str(): True, None, [1, 'a'], {'k': 1}
std::string repr(const Value& v);       // Python repr()
std::string type_name(const Value& v);  // "str", "int", "list", "dict object", ...
bool equals(const Value& a, const Value& b);
bool json_equals(const Json& a, const Json& b);
// -1, 0, 1 like Python's ordering; fails on incomparable types.
int compare(const Value& a, const Value& b, int line);
int compare_json(const Json& a, const Json& b, int line, int depth = 0);
std::int64_t length(const Value& v, int line);  // len(); strings count code points

std::string python_float_repr(double d);
std::string python_str_repr(std::string_view s);

// JSON text the way Python's json.dumps writes it.
struct DumpOptions {
  int indent = -1;          // < 0: one line
  std::string indent_text;  // used instead of spaces when indent was given as a string
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool ensure_ascii = false;
  bool sort_keys = false;
};
std::string dump_json(const Json& j, const DumpOptions& options);

// Dict keys. JSON objects only have string keys; integer keys a template
// writes ({512: 128}) are stored with a marker prefix and read back as ints.
std::optional<std::string> dict_key(const Value& key);  // nullopt: not a string or int
Json key_value(const std::string& stored);              // the key as the template sees it
std::string key_text(const std::string& stored);        // the key as json.dumps writes it

// UTF-8 helpers for Python's code-point string semantics.
std::size_t code_point_count(std::string_view s);
std::vector<std::string_view> code_points(std::string_view s);

}  // namespace graft::jinja

// Renders a parsed template: walks the syntax tree over Values with jinja2's
// (Python's) semantics. One Interpreter per render; the Program is shared and
// never modified, so one parse serves any number of renders.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "chat/jinja_ast.h"
#include "chat/jinja_builtins.h"
#include "chat/jinja_callable.h"

namespace graft::jinja {

// Bounds that keep a hostile or broken template from running away.
struct RenderLimits {
  std::size_t max_output_bytes = 64u << 20;
  std::int64_t max_steps = 5'000'000;  // loop iterations + macro calls + range() elements
  int max_call_depth = 100;            // nested macro calls
};

struct Scope {
  struct NameHash {
    using is_transparent = void;  // look names up without building a std::string
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, Value, NameHash, std::equal_to<>> vars;
  std::shared_ptr<Scope> parent;
  const Value* find(std::string_view name) const;
};

class Interpreter {
 public:
  Interpreter(const Program& program, RenderLimits limits, std::chrono::system_clock::time_point now);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Variables visible to the template (messages, tools, bos_token, ...).
  void set_global(const std::string& name, Value value);
  // Renders the whole template; throws TemplateError.
  std::string render();

  // Used by the built-in filters, tests and functions.
  Value call(const Value& callee, const CallArgs& args, int line);
  Value apply_filter(std::string_view name, const Value& input, const CallArgs& args, int line);
  bool apply_test(std::string_view name, const Value& input, const CallArgs& args, int line);
  void count_steps(std::int64_t n, int line);
  std::chrono::system_clock::time_point now() const { return now_; }
  // namespace() objects, emptied when the render ends.
  void track(const std::shared_ptr<Namespace>& ns);

 private:
  enum class Flow { normal, break_, continue_ };

  Flow exec(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out);
  Flow exec_stmt(const Stmt& stmt, const std::shared_ptr<Scope>& scope, std::string& out);
  Flow exec_for(const ForStmt& stmt, const std::shared_ptr<Scope>& scope, std::string& out);
  void assign(const SetTarget& target, Value value, Scope& scope, int line);
  void write(std::string& out, std::string_view text, int line);

  Value eval(const Expr& expr, Scope& scope);
  Value eval_name(const NameExpr& expr, Scope& scope);
  Value eval_call(const CallExpr& expr, Scope& scope);
  Value eval_binary(const BinaryExpr& expr, Scope& scope);
  bool eval_compare(const CompareExpr& expr, Scope& scope);
  CallArgs eval_args(const Arguments& args, Scope& scope);
  Value apply_filter_chain(const std::vector<std::unique_ptr<FilterExpr>>& filters, Value value,
                           Scope& scope);

  friend struct MacroCallable;
  Value call_macro(const MacroStmt& macro, const std::shared_ptr<Scope>& closure, const CallArgs& args,
                   int line);

  const Program& program_;
  RenderLimits limits_;
  std::chrono::system_clock::time_point now_;
  std::shared_ptr<Scope> globals_;
  std::int64_t steps_ = 0;
  int call_depth_ = 0;
  std::vector<std::weak_ptr<Namespace>> namespaces_;
};

}  // namespace graft::jinja

#include "chat/jinja_interpreter.h"

#include <fmt/format.h>

#include "chat/jinja_operators.h"

namespace graft::jinja {

// --- scopes and callables ---------------------------------------------------------

const Value* Scope::find(std::string_view name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

const Value* CallArgs::find(std::size_t position, std::string_view name) const {
  if (position < positional.size()) return &positional[position];
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  return nullptr;
}

void CallArgs::expect(std::string_view function, std::size_t max_positional,
                      std::initializer_list<std::string_view> names, int line) const {
  if (positional.size() > max_positional) {
    fail(fmt::format("{}() takes at most {} positional argument(s) ({} given)", function, max_positional,
                     positional.size()),
         line);
  }
  for (const auto& [k, v] : keyword) {
    bool known = false;
    for (std::string_view n : names) known = known || n == k;
    if (!known) fail(fmt::format("{}() got an unexpected keyword argument '{}'", function, k), line);
  }
}

Value loop_attribute(const LoopState& loop, std::string_view name) {
  auto n = static_cast<std::int64_t>(loop.items.size());
  auto i = static_cast<std::int64_t>(loop.index);
  if (name == "index") return Value(i + 1);
  if (name == "index0") return Value(i);
  if (name == "revindex") return Value(n - i);
  if (name == "revindex0") return Value(n - i - 1);
  if (name == "first") return Value(i == 0);
  if (name == "last") return Value(i == n - 1);
  if (name == "length") return Value(n);
  if (name == "depth") return Value(static_cast<std::int64_t>(loop.depth));
  if (name == "depth0") return Value(static_cast<std::int64_t>(loop.depth - 1));
  if (name == "previtem")
    return i > 0 ? loop.items[loop.index - 1] : Value::undefined("there is no previous item");
  if (name == "nextitem")
    return i + 1 < n ? loop.items[loop.index + 1] : Value::undefined("there is no next item");
  return Value::undefined(fmt::format("'loop' has no attribute '{}'", name));
}

// A macro sees the scope it was defined in. That scope usually holds the
// macro itself, so it is held weakly: a strong reference would be a cycle.
struct MacroCallable : Callable {
  const MacroStmt* macro;
  std::weak_ptr<Scope> closure;
  MacroCallable(const MacroStmt* m, const std::shared_ptr<Scope>& c)
      : Callable(m->name), macro(m), closure(c) {}
  Value call(Interpreter& in, const CallArgs& args, int line) const override {
    std::shared_ptr<Scope> scope = closure.lock();
    if (!scope) fail(fmt::format("macro '{}' is called after the block that defined it ended", name), line);
    return in.call_macro(*macro, scope, args, line);
  }
};

// --- the interpreter ---------------------------------------------------------------

Interpreter::Interpreter(const Program& program, RenderLimits limits,
                         std::chrono::system_clock::time_point now)
    : program_(program), limits_(limits), now_(now), globals_(std::make_shared<Scope>()) {}

Interpreter::~Interpreter() {
  // Namespaces may hold themselves (`set ns.me = ns`): empty them so that cycles are freed.
  for (const std::weak_ptr<Namespace>& weak : namespaces_) {
    if (std::shared_ptr<Namespace> ns = weak.lock()) ns->attrs.clear();
  }
}

void Interpreter::track(const std::shared_ptr<Namespace>& ns) {
  namespaces_.push_back(ns);
}

void Interpreter::set_global(const std::string& name, Value value) {
  globals_->vars[name] = std::move(value);
}

std::string Interpreter::render() {
  std::string out;
  exec(program_.body, globals_, out);
  return out;
}

void Interpreter::count_steps(std::int64_t n, int line) {
  steps_ += n;
  if (steps_ > limits_.max_steps) {
    fail(fmt::format("template ran too long (more than {} loop iterations and calls)", limits_.max_steps),
         line);
  }
}

void Interpreter::write(std::string& out, std::string_view text, int line) {
  if (out.size() + text.size() > limits_.max_output_bytes) {
    fail(fmt::format("template output exceeds {} bytes", limits_.max_output_bytes), line);
  }
  out += text;
}

Interpreter::Flow Interpreter::exec(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out) {
  for (const StmtPtr& stmt : body) {
    Flow flow;
    try {
      flow = exec_stmt(*stmt, scope, out);
    } catch (TemplateError& e) {
      if (e.line == 0) e.line = stmt->line;  // helpers that do not know the line
      throw;
    }
    if (flow != Flow::normal) return flow;
  }
  return Flow::normal;
}

Interpreter::Flow Interpreter::exec_stmt(const Stmt& stmt, const std::shared_ptr<Scope>& scope,
                                         std::string& out) {
  switch (stmt.kind) {
    case StmtKind::text:
      write(out, static_cast<const TextStmt&>(stmt).text, stmt.line);
      return Flow::normal;
    case StmtKind::output: {
      Value v = eval(*static_cast<const OutputStmt&>(stmt).expr, *scope);
      if (!v.is_undefined()) write(out, to_str(v), stmt.line);
      return Flow::normal;
    }
    case StmtKind::if_: {
      const auto& s = static_cast<const IfStmt&>(stmt);
      for (const auto& [condition, body] : s.branches) {
        if (truthy(eval(*condition, *scope))) return exec(body, scope, out);
      }
      return exec(s.otherwise, scope, out);
    }
    case StmtKind::for_:
      return exec_for(static_cast<const ForStmt&>(stmt), scope, out);
    case StmtKind::set: {
      const auto& s = static_cast<const SetStmt&>(stmt);
      assign(s.target, eval(*s.value, *scope), *scope, stmt.line);
      return Flow::normal;
    }
    case StmtKind::set_block: {
      const auto& s = static_cast<const SetBlockStmt&>(stmt);
      std::string captured;
      exec(s.body, scope, captured);
      assign(s.target, apply_filter_chain(s.filters, Value(std::move(captured)), *scope), *scope, stmt.line);
      return Flow::normal;
    }
    case StmtKind::macro: {
      const auto& s = static_cast<const MacroStmt&>(stmt);
      scope->vars[s.name] = Value(std::make_shared<const MacroCallable>(&s, scope));
      return Flow::normal;
    }
    case StmtKind::filter_block: {
      const auto& s = static_cast<const FilterBlockStmt&>(stmt);
      std::string captured;
      exec(s.body, scope, captured);
      Value filtered = apply_filter_chain(s.filters, Value(std::move(captured)), *scope);
      write(out, to_str(filtered), stmt.line);
      return Flow::normal;
    }
    case StmtKind::break_:
      return Flow::break_;
    case StmtKind::continue_:
      return Flow::continue_;
  }
  return Flow::normal;
}

Interpreter::Flow Interpreter::exec_for(const ForStmt& stmt, const std::shared_ptr<Scope>& scope,
                                        std::string& out) {
  Value iterable = eval(*stmt.iterable, *scope);
  if (iterable.is_none()) fail("'NoneType' object is not iterable", stmt.line);
  std::vector<Value> items = iterate(iterable, stmt.line);

  auto bind = [&](Scope& target, const Value& item) {
    if (stmt.targets.size() == 1) {
      target.vars[stmt.targets[0]] = item;
      return;
    }
    std::vector<Value> parts = iterate(item, stmt.line);
    if (parts.size() != stmt.targets.size()) {
      fail(fmt::format("cannot unpack {} values into {} loop variables", parts.size(), stmt.targets.size()),
           stmt.line);
    }
    for (std::size_t i = 0; i < parts.size(); ++i) target.vars[stmt.targets[i]] = parts[i];
  };

  if (stmt.condition) {
    std::vector<Value> kept;
    auto probe = std::make_shared<Scope>();
    probe->parent = scope;
    for (const Value& item : items) {
      bind(*probe, item);
      if (truthy(eval(*stmt.condition, *probe))) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec(stmt.otherwise, scope, out);

  auto loop = std::make_shared<LoopState>();
  loop->items = std::move(items);
  Value loop_value(loop);
  for (loop->index = 0; loop->index < loop->items.size(); ++loop->index) {
    count_steps(1, stmt.line);
    auto iteration = std::make_shared<Scope>();  // each pass starts fresh, as in jinja2
    iteration->parent = scope;
    iteration->vars["loop"] = loop_value;
    bind(*iteration, loop->items[loop->index]);
    Flow flow = exec(stmt.body, iteration, out);
    if (flow == Flow::break_) break;
  }
  return Flow::normal;
}

void Interpreter::assign(const SetTarget& target, Value value, Scope& scope, int line) {
  if (!target.ns_attribute.empty()) {
    const Value* ns = scope.find(target.names[0]);
    if (!ns || !ns->is_namespace()) {
      fail(fmt::format("cannot assign attribute '{}' on '{}': not a namespace", target.ns_attribute,
                       target.names[0]),
           line);
    }
    ns->ns().attrs[target.ns_attribute] = std::move(value);
    return;
  }
  if (target.names.size() == 1) {
    scope.vars[target.names[0]] = std::move(value);
    return;
  }
  std::vector<Value> parts = iterate(value, line);
  if (parts.size() != target.names.size()) {
    fail(fmt::format("cannot unpack {} values into {} names", parts.size(), target.names.size()), line);
  }
  for (std::size_t i = 0; i < parts.size(); ++i) scope.vars[target.names[i]] = parts[i];
}

Value Interpreter::apply_filter_chain(const std::vector<std::unique_ptr<FilterExpr>>& filters, Value value,
                                      Scope& scope) {
  for (const auto& f : filters) value = apply_filter(f->name, value, eval_args(f->args, scope), f->line);
  return value;
}

// --- expressions -----------------------------------------------------------------

Value Interpreter::eval(const Expr& expr, Scope& scope) {
  switch (expr.kind) {
    case ExprKind::literal:
      return static_cast<const LiteralExpr&>(expr).value;
    case ExprKind::name:
      return eval_name(static_cast<const NameExpr&>(expr), scope);
    case ExprKind::list: {
      Json out = Json::array();
      for (const ExprPtr& item : static_cast<const ListExpr&>(expr).items) {
        out.push_back(eval(*item, scope).to_json(expr.line));
      }
      return Value(std::move(out));
    }
    case ExprKind::dict: {
      Json out = Json::object();
      for (const auto& [k, v] : static_cast<const DictExpr&>(expr).items) {
        Value key = eval(*k, scope);
        std::optional<std::string> stored = dict_key(key);
        if (!stored)
          fail(fmt::format("dict keys must be strings or integers, not {}", type_name(key)), expr.line);
        out[*stored] = eval(*v, scope).to_json(expr.line);
      }
      return Value(std::move(out));
    }
    case ExprKind::attribute: {
      const auto& e = static_cast<const AttributeExpr&>(expr);
      return get_attribute(eval(*e.object, scope), e.name, expr.line);
    }
    case ExprKind::subscript: {
      const auto& e = static_cast<const SubscriptExpr&>(expr);
      Value object = eval(*e.object, scope);
      return get_item(object, eval(*e.index, scope), expr.line);
    }
    case ExprKind::slice: {
      const auto& e = static_cast<const SliceExpr&>(expr);
      Value object = eval(*e.object, scope);
      Value none = Value::none();
      Value start = e.start ? eval(*e.start, scope) : none;
      Value stop = e.stop ? eval(*e.stop, scope) : none;
      Value step = e.step ? eval(*e.step, scope) : none;
      return slice(object, start, stop, step, expr.line);
    }
    case ExprKind::call:
      return eval_call(static_cast<const CallExpr&>(expr), scope);
    case ExprKind::filter: {
      const auto& e = static_cast<const FilterExpr&>(expr);
      Value input = eval(*e.input, scope);
      return apply_filter(e.name, input, eval_args(e.args, scope), expr.line);
    }
    case ExprKind::test: {
      const auto& e = static_cast<const TestExpr&>(expr);
      Value input = eval(*e.input, scope);
      bool result = apply_test(e.name, input, eval_args(e.args, scope), expr.line);
      return Value(result != e.negated);
    }
    case ExprKind::unary: {
      const auto& e = static_cast<const UnaryExpr&>(expr);
      Value v = eval(*e.operand, scope);
      if (e.op == Op::not_) return Value(!truthy(v));
      if (!v.is_number() && !v.is_bool())
        fail(fmt::format("bad operand type for unary {}: '{}'", e.op == Op::neg ? '-' : '+', type_name(v)),
             expr.line);
      if (e.op == Op::pos) return v.is_bool() ? Value(v.as_int()) : v;
      if (v.is_number() && v.json().is_number_float()) return Value(-v.as_double());
      return arithmetic(Op::sub, Value(static_cast<std::int64_t>(0)), v, expr.line);
    }
    case ExprKind::binary:
      return eval_binary(static_cast<const BinaryExpr&>(expr), scope);
    case ExprKind::compare:
      return Value(eval_compare(static_cast<const CompareExpr&>(expr), scope));
    case ExprKind::conditional: {
      const auto& e = static_cast<const ConditionalExpr&>(expr);
      if (truthy(eval(*e.condition, scope))) return eval(*e.then, scope);
      if (e.otherwise) return eval(*e.otherwise, scope);
      return Value::undefined("the conditional expression had no else branch");
    }
  }
  fail("unknown expression", expr.line);
}

Value Interpreter::eval_name(const NameExpr& expr, Scope& scope) {
  if (const Value* v = scope.find(expr.name)) return *v;
  if (const Value* fn = find_global_function(expr.name)) return *fn;
  return Value::undefined(fmt::format("'{}' is undefined", expr.name));
}

CallArgs Interpreter::eval_args(const Arguments& args, Scope& scope) {
  CallArgs out;
  out.positional.reserve(args.positional.size());
  for (const ExprPtr& e : args.positional) out.positional.push_back(eval(*e, scope));
  for (const auto& [name, e] : args.keyword) out.keyword.emplace_back(name, eval(*e, scope));
  return out;
}

Value Interpreter::eval_call(const CallExpr& expr, Scope& scope) {
  // `x.method(...)` calls the method directly rather than building a bound method first.
  if (expr.callee->kind == ExprKind::attribute) {
    const auto& attr = static_cast<const AttributeExpr&>(*expr.callee);
    Value object = eval(*attr.object, scope);
    if (object.is_json() && has_method(object, attr.name)) {
      return call_method(*this, object, attr.name, eval_args(expr.args, scope), expr.line);
    }
    Value callee = get_attribute(object, attr.name, expr.line);
    return call(callee, eval_args(expr.args, scope), expr.line);
  }
  Value callee = eval(*expr.callee, scope);
  if (callee.is_undefined()) fail(callee.undefined_what() + " (called as a function)", expr.line);
  return call(callee, eval_args(expr.args, scope), expr.line);
}

Value Interpreter::call(const Value& callee, const CallArgs& args, int line) {
  if (callee.is_undefined()) fail(callee.undefined_what(), line);
  if (!callee.is_callable()) fail(fmt::format("'{}' object is not callable", type_name(callee)), line);
  return callee.callable().call(*this, args, line);
}

Value Interpreter::eval_binary(const BinaryExpr& expr, Scope& scope) {
  Value left = eval(*expr.left, scope);
  switch (expr.op) {
    case Op::and_:
      return truthy(left) ? eval(*expr.right, scope) : left;
    case Op::or_:
      return truthy(left) ? left : eval(*expr.right, scope);
    default:
      break;
  }
  Value right = eval(*expr.right, scope);
  switch (expr.op) {
    case Op::concat: {
      // Long chains (`ns.out = ns.out ~ a ~ b`) reuse the left string's buffer.
      std::string s = left.is_string() ? left.take_string() : left.is_undefined() ? "" : to_str(left);
      if (right.is_string())
        s += right.str();
      else if (!right.is_undefined())
        s += to_str(right);
      return Value(std::move(s));
    }
    case Op::in:
      return Value(contains(right, left, expr.line));
    case Op::not_in:
      return Value(!contains(right, left, expr.line));
    default:
      break;
  }
  if (left.is_undefined()) fail(left.undefined_what(), expr.line);
  if (right.is_undefined()) fail(right.undefined_what(), expr.line);
  if (expr.op == Op::add && left.is_string() && right.is_string() && !left.is_markup() &&
      !right.is_markup()) {
    std::string s = left.take_string();
    s += right.str();
    return Value(std::move(s));
  }
  return arithmetic(expr.op, left, right, expr.line);
}

bool Interpreter::eval_compare(const CompareExpr& expr, Scope& scope) {
  Value left = eval(*expr.first, scope);
  for (const auto& [op, operand] : expr.rest) {
    Value right = eval(*operand, scope);
    bool ok = false;
    switch (op) {
      case CmpOp::eq:
        ok = equals(left, right);
        break;
      case CmpOp::ne:
        ok = !equals(left, right);
        break;
      case CmpOp::lt:
        ok = compare(left, right, expr.line) < 0;
        break;
      case CmpOp::le:
        ok = compare(left, right, expr.line) <= 0;
        break;
      case CmpOp::gt:
        ok = compare(left, right, expr.line) > 0;
        break;
      case CmpOp::ge:
        ok = compare(left, right, expr.line) >= 0;
        break;
    }
    if (!ok) return false;
    left = std::move(right);
  }
  return true;
}

Value Interpreter::apply_filter(std::string_view name, const Value& input, const CallArgs& args, int line) {
  return call_filter(*this, name, input, args, line);
}

bool Interpreter::apply_test(std::string_view name, const Value& input, const CallArgs& args, int line) {
  return call_test(*this, name, input, args, line);
}

Value Interpreter::call_macro(const MacroStmt& macro, const std::shared_ptr<Scope>& closure,
                              const CallArgs& args, int line) {
  if (call_depth_ >= limits_.max_call_depth) {
    fail(fmt::format("macro '{}' nests deeper than {} calls", macro.name, limits_.max_call_depth), line);
  }
  count_steps(1, line);
  auto scope = std::make_shared<Scope>();
  scope->parent = closure;
  Json extra_positional = Json::array();
  for (std::size_t i = 0; i < args.positional.size(); ++i) {
    if (i < macro.params.size()) {
      scope->vars[macro.params[i].first] = args.positional[i];
    } else {
      extra_positional.push_back(args.positional[i].to_json(line));
    }
  }
  Json extra_keywords = Json::object();
  for (const auto& [name, value] : args.keyword) {
    bool is_param = false;
    for (const auto& p : macro.params) is_param = is_param || p.first == name;
    if (is_param) {
      scope->vars[name] = value;
    } else {
      extra_keywords[name] = value.to_json(line);
    }
  }
  for (const auto& [name, default_value] : macro.params) {
    if (scope->vars.count(name)) continue;
    scope->vars[name] = default_value ? eval(*default_value, *scope)
                                      : Value::undefined(fmt::format("'{}' is undefined", name));
  }
  scope->vars["varargs"] = Value(std::move(extra_positional));
  scope->vars["kwargs"] = Value(std::move(extra_keywords));
  std::string out;
  ++call_depth_;
  try {
    exec(macro.body, scope, out);
  } catch (...) {
    --call_depth_;
    throw;
  }
  --call_depth_;
  return Value(std::move(out));
}

}  // namespace graft::jinja

// The syntax tree of a parsed template. Every node carries its source line
// so that errors can say where they happened.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace graft::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// --- expressions --------------------------------------------------------------

enum class ExprKind {
  literal,      // 1, 'a', true, none
  name,         // x
  list,         // [a, b] and tuples (a, b)
  dict,         // {k: v}
  attribute,    // x.name
  subscript,    // x[i]
  slice,        // x[a:b:c]
  call,         // f(a, k=v)
  filter,       // x | name(args)
  test,         // x is [not] name(args)
  unary,        // -x, +x, not x
  binary,       // arithmetic, ~, and, or, in, not in
  compare,      // a < b <= c (chained)
  conditional,  // a if cond else b
};

enum class Op { add, sub, mul, div, floordiv, mod, pow, concat, and_, or_, in, not_in, neg, pos, not_ };
enum class CmpOp { eq, ne, lt, le, gt, ge };

struct Expr {
  ExprKind kind;
  int line;
  Expr(ExprKind k, int l) : kind(k), line(l) {}
  virtual ~Expr() = default;
};

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct LiteralExpr : Expr {
  Value value;
  LiteralExpr(Value v, int l) : Expr(ExprKind::literal, l), value(std::move(v)) {}
};
struct NameExpr : Expr {
  std::string name;
  NameExpr(std::string n, int l) : Expr(ExprKind::name, l), name(std::move(n)) {}
};
struct ListExpr : Expr {
  std::vector<ExprPtr> items;
  explicit ListExpr(int l) : Expr(ExprKind::list, l) {}
};
struct DictExpr : Expr {
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
  explicit DictExpr(int l) : Expr(ExprKind::dict, l) {}
};
struct AttributeExpr : Expr {
  ExprPtr object;
  std::string name;
  AttributeExpr(ExprPtr o, std::string n, int l)
      : Expr(ExprKind::attribute, l), object(std::move(o)), name(std::move(n)) {}
};
struct SubscriptExpr : Expr {
  ExprPtr object, index;
  SubscriptExpr(ExprPtr o, ExprPtr i, int l)
      : Expr(ExprKind::subscript, l), object(std::move(o)), index(std::move(i)) {}
};
struct SliceExpr : Expr {
  ExprPtr object, start, stop, step;  // any of the last three may be null
  explicit SliceExpr(int l) : Expr(ExprKind::slice, l) {}
};
struct CallExpr : Expr {
  ExprPtr callee;
  Arguments args;
  CallExpr(ExprPtr c, int l) : Expr(ExprKind::call, l), callee(std::move(c)) {}
};
struct FilterExpr : Expr {
  ExprPtr input;  // null inside a {% filter %} block
  std::string name;
  Arguments args;
  FilterExpr(ExprPtr in, std::string n, int l)
      : Expr(ExprKind::filter, l), input(std::move(in)), name(std::move(n)) {}
};
struct TestExpr : Expr {
  ExprPtr input;
  std::string name;
  Arguments args;
  bool negated = false;
  TestExpr(ExprPtr in, std::string n, int l)
      : Expr(ExprKind::test, l), input(std::move(in)), name(std::move(n)) {}
};
struct UnaryExpr : Expr {
  Op op;
  ExprPtr operand;
  UnaryExpr(Op o, ExprPtr x, int l) : Expr(ExprKind::unary, l), op(o), operand(std::move(x)) {}
};
struct BinaryExpr : Expr {
  Op op;
  ExprPtr left, right;
  BinaryExpr(Op o, ExprPtr a, ExprPtr b, int l)
      : Expr(ExprKind::binary, l), op(o), left(std::move(a)), right(std::move(b)) {}
};
struct CompareExpr : Expr {
  ExprPtr first;
  std::vector<std::pair<CmpOp, ExprPtr>> rest;
  CompareExpr(ExprPtr f, int l) : Expr(ExprKind::compare, l), first(std::move(f)) {}
};
struct ConditionalExpr : Expr {
  ExprPtr condition, then, otherwise;  // otherwise may be null (undefined)
  explicit ConditionalExpr(int l) : Expr(ExprKind::conditional, l) {}
};

// --- statements ----------------------------------------------------------------

enum class StmtKind { text, output, if_, for_, set, set_block, macro, filter_block, break_, continue_ };

struct Stmt {
  StmtKind kind;
  int line;
  Stmt(StmtKind k, int l) : kind(k), line(l) {}
  virtual ~Stmt() = default;
};

struct TextStmt : Stmt {
  std::string text;
  TextStmt(std::string t, int l) : Stmt(StmtKind::text, l), text(std::move(t)) {}
};
struct OutputStmt : Stmt {
  ExprPtr expr;
  OutputStmt(ExprPtr e, int l) : Stmt(StmtKind::output, l), expr(std::move(e)) {}
};
struct IfStmt : Stmt {
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif, ...
  Body otherwise;
  explicit IfStmt(int l) : Stmt(StmtKind::if_, l) {}
};
struct ForStmt : Stmt {
  std::vector<std::string> targets;  // one name, or several to unpack
  ExprPtr iterable;
  ExprPtr condition;  // `for x in xs if cond`; may be null
  Body body, otherwise;
  explicit ForStmt(int l) : Stmt(StmtKind::for_, l) {}
};
// Where `set` stores: names (several to unpack), or one namespace attribute.
struct SetTarget {
  std::vector<std::string> names;
  std::string ns_attribute;  // set when the target is `names[0].ns_attribute`
};
struct SetStmt : Stmt {
  SetTarget target;
  ExprPtr value;
  explicit SetStmt(int l) : Stmt(StmtKind::set, l) {}
};
struct SetBlockStmt : Stmt {
  SetTarget target;
  std::vector<std::unique_ptr<FilterExpr>> filters;  // {% set x | trim %}
  Body body;
  explicit SetBlockStmt(int l) : Stmt(StmtKind::set_block, l) {}
};
struct MacroStmt : Stmt {
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
  Body body;
  explicit MacroStmt(int l) : Stmt(StmtKind::macro, l) {}
};
struct FilterBlockStmt : Stmt {
  std::vector<std::unique_ptr<FilterExpr>> filters;
  Body body;
  explicit FilterBlockStmt(int l) : Stmt(StmtKind::filter_block, l) {}
};

struct Program {
  Body body;
};

}  // namespace graft::jinja

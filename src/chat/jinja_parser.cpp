#include "chat/jinja_parser.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <set>

#include <fmt/format.h>

#include "chat/jinja_builtins.h"
#include "chat/jinja_lexer.h"

namespace graft::jinja {

namespace {

constexpr int kMaxNesting = 200;  // expression and block depth; deeper input is refused, not a stack overflow

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::text:
      return "text";
    case TokenType::expr_open:
      return "'{{'";
    case TokenType::expr_close:
      return "'}}'";
    case TokenType::stmt_open:
      return "'{%'";
    case TokenType::stmt_close:
      return "'%}'";
    case TokenType::eof:
      return "end of template";
    case TokenType::string:
      return "string literal";
    default:
      return "'" + t.value + "'";
  }
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Program run() {
    Program program;
    std::string end = parse_body(program.body, {});
    (void)end;
    return program;
  }

 private:
  // --- token helpers ---
  const Token& peek(std::size_t ahead = 0) const {
    std::size_t i = std::min(pos_ + ahead, tokens_.size() - 1);
    return tokens_[i];
  }
  const Token& next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool at_op(std::string_view op, std::size_t ahead = 0) const {
    return peek(ahead).type == TokenType::op && peek(ahead).value == op;
  }
  bool at_name(std::string_view name, std::size_t ahead = 0) const {
    return peek(ahead).type == TokenType::name && peek(ahead).value == name;
  }
  bool accept_op(std::string_view op) {
    if (!at_op(op)) return false;
    next();
    return true;
  }
  bool accept_name(std::string_view name) {
    if (!at_name(name)) return false;
    next();
    return true;
  }
  [[noreturn]] void unexpected(const std::string& wanted) const {
    fail(fmt::format("unexpected {} (expected {})", describe(peek()), wanted), peek().line);
  }
  void expect_op(std::string_view op) {
    if (!accept_op(op)) unexpected("'" + std::string(op) + "'");
  }
  std::string expect_name() {
    if (peek().type != TokenType::name) unexpected("a name");
    return next().value;
  }
  void expect_close() {
    if (peek().type != TokenType::stmt_close) unexpected("'%}'");
    next();
  }

  struct Depth {
    explicit Depth(Parser& p) : parser(p) {
      if (++parser.depth_ > kMaxNesting) fail("template nests too deeply", parser.peek().line);
    }
    ~Depth() { --parser.depth_; }
    Parser& parser;
  };

  // --- statements ---

  // Parses statements until one of `ends` (a tag name such as "endif") and
  // returns that name, leaving the tokens after it unread. Empty ends: until eof.
  std::string parse_body(Body& body, const std::set<std::string, std::less<>>& ends) {
    Depth depth(*this);
    while (true) {
      const Token& t = peek();
      switch (t.type) {
        case TokenType::eof:
          if (!ends.empty()) {
            auto closing = std::find_if(ends.begin(), ends.end(),
                                        [](const std::string& e) { return e.starts_with("end"); });
            fail(fmt::format("unexpected end of template: expected '{{% {} %}}'",
                             closing != ends.end() ? *closing : *ends.begin()),
                 t.line);
          }
          return "";
        case TokenType::text:
          body.push_back(std::make_unique<TextStmt>(next().value, t.line));
          break;
        case TokenType::expr_open: {
          int line = next().line;
          ExprPtr e = parse_tuple();
          if (peek().type != TokenType::expr_close) unexpected("'}}'");
          next();
          body.push_back(std::make_unique<OutputStmt>(std::move(e), line));
          break;
        }
        case TokenType::stmt_open: {
          const Token& name = peek(1);
          if (name.type == TokenType::name && ends.count(name.value)) {
            next();
            next();
            return name.value;
          }
          next();
          body.push_back(parse_statement());
          break;
        }
        default:
          unexpected("text or a tag");
      }
    }
  }

  StmtPtr parse_statement() {
    const Token& t = peek();
    if (t.type != TokenType::name) unexpected("a tag name");
    std::string tag = next().value;
    int line = t.line;
    if (tag == "if") return parse_if(line);
    if (tag == "for") return parse_for(line);
    if (tag == "set") return parse_set(line);
    if (tag == "macro") return parse_macro(line);
    if (tag == "filter") return parse_filter_block(line);
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail(fmt::format("'{}' outside a for loop", tag), line);
      expect_close();
      return std::make_unique<Stmt>(tag == "break" ? StmtKind::break_ : StmtKind::continue_, line);
    }
    if (tag == "generation") {
      // Hugging Face's assistant-mask marker: renders its body unchanged.
      expect_close();
      auto block = std::make_unique<IfStmt>(line);
      Body body;
      parse_body(body, {"endgeneration"});
      expect_close();
      block->branches.emplace_back(std::make_unique<LiteralExpr>(Value(true), line), std::move(body));
      return block;
    }
    static const std::set<std::string, std::less<>> kKnownEnds = {
        "endif", "endfor", "endmacro", "endset", "endfilter", "endgeneration", "elif", "else", "endraw"};
    if (kKnownEnds.count(tag)) fail(fmt::format("unexpected '{{% {} %}}'", tag), line);
    fail(fmt::format("unsupported tag '{}'", tag), line);
  }

  StmtPtr parse_if(int line) {
    auto stmt = std::make_unique<IfStmt>(line);
    ExprPtr condition = parse_expression();
    expect_close();
    while (true) {
      Body body;
      std::string end = parse_body(body, {"elif", "else", "endif"});
      stmt->branches.emplace_back(std::move(condition), std::move(body));
      if (end == "elif") {
        condition = parse_expression();
        expect_close();
        continue;
      }
      if (end == "else") {
        expect_close();
        parse_body(stmt->otherwise, {"endif"});
      }
      expect_close();
      return stmt;
    }
  }

  StmtPtr parse_for(int line) {
    auto stmt = std::make_unique<ForStmt>(line);
    bool parenthesized = accept_op("(");
    do {
      stmt->targets.push_back(expect_name());
    } while (accept_op(","));
    if (parenthesized) expect_op(")");
    if (!accept_name("in")) unexpected("'in'");
    stmt->iterable = parse_tuple(/*with_condition=*/false);
    if (accept_name("if")) stmt->condition = parse_expression();
    if (accept_name("recursive")) fail("recursive loops are not supported", line);
    expect_close();
    ++loop_depth_;
    std::string end = parse_body(stmt->body, {"else", "endfor"});
    --loop_depth_;
    if (end == "else") {
      expect_close();
      parse_body(stmt->otherwise, {"endfor"});
    }
    expect_close();
    return stmt;
  }

  SetTarget parse_set_target() {
    SetTarget target;
    target.names.push_back(expect_name());
    if (accept_op(".")) {
      target.ns_attribute = expect_name();
      return target;
    }
    while (accept_op(",")) target.names.push_back(expect_name());
    return target;
  }

  StmtPtr parse_set(int line) {
    SetTarget target = parse_set_target();
    if (accept_op("=")) {
      auto stmt = std::make_unique<SetStmt>(line);
      stmt->target = std::move(target);
      stmt->value = parse_tuple();
      expect_close();
      return stmt;
    }
    auto stmt = std::make_unique<SetBlockStmt>(line);
    stmt->target = std::move(target);
    while (accept_op("|")) stmt->filters.push_back(parse_filter(nullptr));
    expect_close();
    parse_body(stmt->body, {"endset"});
    expect_close();
    return stmt;
  }

  StmtPtr parse_macro(int line) {
    auto stmt = std::make_unique<MacroStmt>(line);
    stmt->name = expect_name();
    expect_op("(");
    while (!accept_op(")")) {
      if (!stmt->params.empty()) expect_op(",");
      if (accept_op(")")) break;
      std::string param = expect_name();
      ExprPtr default_value;
      if (accept_op("=")) default_value = parse_expression();
      stmt->params.emplace_back(std::move(param), std::move(default_value));
    }
    expect_close();
    int saved_loops = loop_depth_;
    loop_depth_ = 0;
    parse_body(stmt->body, {"endmacro"});
    loop_depth_ = saved_loops;
    if (peek().type == TokenType::name) next();  // {% endmacro name %}
    expect_close();
    return stmt;
  }

  StmtPtr parse_filter_block(int line) {
    auto stmt = std::make_unique<FilterBlockStmt>(line);
    do {
      stmt->filters.push_back(parse_filter(nullptr));
    } while (accept_op("|"));
    expect_close();
    parse_body(stmt->body, {"endfilter"});
    expect_close();
    return stmt;
  }

  // --- expressions ---

  // Expressions separated by commas form a tuple (a list here).
  ExprPtr parse_tuple(bool with_condition = true) {
    int line = peek().line;
    ExprPtr first = with_condition ? parse_expression() : parse_or();
    if (!at_op(",")) return first;
    auto list = std::make_unique<ListExpr>(line);
    list->items.push_back(std::move(first));
    while (accept_op(",")) {
      if (peek().type == TokenType::stmt_close || peek().type == TokenType::expr_close || at_op(")")) break;
      list->items.push_back(with_condition ? parse_expression() : parse_or());
    }
    return list;
  }

  ExprPtr parse_expression() {
    Depth depth(*this);
    ExprPtr value = parse_or();
    while (at_name("if")) {
      int line = next().line;
      auto cond = std::make_unique<ConditionalExpr>(line);
      cond->condition = parse_or();
      cond->then = std::move(value);
      if (accept_name("else")) cond->otherwise = parse_expression();
      value = std::move(cond);
    }
    return value;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (at_name("or")) {
      int line = next().line;
      left = std::make_unique<BinaryExpr>(Op::or_, std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (at_name("and")) {
      int line = next().line;
      left = std::make_unique<BinaryExpr>(Op::and_, std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (at_name("not")) {
      Depth depth(*this);
      int line = next().line;
      return std::make_unique<UnaryExpr>(Op::not_, parse_not(), line);
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = peek().line;
    ExprPtr left = parse_math1();
    std::unique_ptr<CompareExpr> chain;
    while (true) {
      static const std::pair<std::string_view, CmpOp> kOps[] = {{"==", CmpOp::eq}, {"!=", CmpOp::ne},
                                                                {"<", CmpOp::lt},  {"<=", CmpOp::le},
                                                                {">", CmpOp::gt},  {">=", CmpOp::ge}};
      bool matched = false;
      for (const auto& [text, op] : kOps) {
        if (at_op(text)) {
          next();
          if (!chain) chain = std::make_unique<CompareExpr>(std::move(left), line);
          chain->rest.emplace_back(op, parse_math1());
          matched = true;
          break;
        }
      }
      if (matched) continue;
      if (at_name("in") || (at_name("not") && at_name("in", 1))) {
        bool negated = at_name("not");
        int op_line = next().line;
        if (negated) next();
        ExprPtr current = chain ? std::move(chain) : std::move(left);
        left = std::make_unique<BinaryExpr>(negated ? Op::not_in : Op::in, std::move(current), parse_math1(),
                                            op_line);
        continue;
      }
      break;
    }
    return chain ? std::move(chain) : std::move(left);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (at_op("+") || at_op("-")) {
      const Token& t = next();
      Op op = t.value == "+" ? Op::add : Op::sub;
      left = std::make_unique<BinaryExpr>(op, std::move(left), parse_concat(), t.line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (at_op("~")) {
      int line = next().line;
      left = std::make_unique<BinaryExpr>(Op::concat, std::move(left), parse_math2(), line);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const Token& t = next();
      Op op = t.value == "*" ? Op::mul : t.value == "/" ? Op::div : t.value == "//" ? Op::floordiv : Op::mod;
      left = std::make_unique<BinaryExpr>(op, std::move(left), parse_pow(), t.line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (at_op("**")) {
      int line = next().line;
      left = std::make_unique<BinaryExpr>(Op::pow, std::move(left), parse_unary(true), line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    Depth depth(*this);
    ExprPtr node;
    if (at_op("-") || at_op("+")) {
      const Token& t = next();
      node = std::make_unique<UnaryExpr>(t.value == "-" ? Op::neg : Op::pos, parse_unary(false), t.line);
    } else {
      node = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filter_expr(std::move(node)) : std::move(node);
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    int line = t.line;
    switch (t.type) {
      case TokenType::name: {
        std::string name = next().value;
        if (name == "true" || name == "True") return std::make_unique<LiteralExpr>(Value(true), line);
        if (name == "false" || name == "False") return std::make_unique<LiteralExpr>(Value(false), line);
        if (name == "none" || name == "None") return std::make_unique<LiteralExpr>(Value::none(), line);
        return std::make_unique<NameExpr>(std::move(name), line);
      }
      case TokenType::string: {
        std::string s = next().value;
        while (peek().type == TokenType::string) s += next().value;  // "a" "b" concatenate
        return std::make_unique<LiteralExpr>(Value(std::move(s)), line);
      }
      case TokenType::integer: {
        std::string text = next().value;
        std::int64_t v = 0;
        auto res = std::from_chars(text.data(), text.data() + text.size(), v);
        if (res.ec != std::errc()) fail("integer literal out of range", line);
        return std::make_unique<LiteralExpr>(Value(v), line);
      }
      case TokenType::floating:
        return std::make_unique<LiteralExpr>(Value(std::strtod(next().value.c_str(), nullptr)), line);
      case TokenType::op: {
        if (accept_op("(")) {
          if (accept_op(")")) return std::make_unique<ListExpr>(line);  // ()
          ExprPtr inner = parse_tuple();
          expect_op(")");
          return inner;
        }
        if (accept_op("[")) {
          auto list = std::make_unique<ListExpr>(line);
          while (!accept_op("]")) {
            if (!list->items.empty()) {
              expect_op(",");
              if (accept_op("]")) break;
            }
            list->items.push_back(parse_expression());
          }
          return list;
        }
        if (accept_op("{")) {
          auto dict = std::make_unique<DictExpr>(line);
          while (!accept_op("}")) {
            if (!dict->items.empty()) {
              expect_op(",");
              if (accept_op("}")) break;
            }
            ExprPtr key = parse_expression();
            expect_op(":");
            dict->items.emplace_back(std::move(key), parse_expression());
          }
          return dict;
        }
        break;
      }
      default:
        break;
    }
    unexpected("an expression");
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (at_op(".")) {
        int line = next().line;
        const Token& t = peek();
        if (t.type == TokenType::name) {
          node = std::make_unique<AttributeExpr>(std::move(node), next().value, line);
        } else if (t.type == TokenType::integer) {
          auto index =
              std::make_unique<LiteralExpr>(Value(static_cast<std::int64_t>(std::stoll(next().value))), line);
          node = std::make_unique<SubscriptExpr>(std::move(node), std::move(index), line);
        } else {
          unexpected("an attribute name");
        }
      } else if (at_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (at_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object) {
    int line = next().line;  // '['
    ExprPtr start;
    if (!at_op(":")) {
      start = parse_tuple();
      if (accept_op("]")) return std::make_unique<SubscriptExpr>(std::move(object), std::move(start), line);
    }
    auto slice = std::make_unique<SliceExpr>(line);
    slice->object = std::move(object);
    slice->start = std::move(start);
    expect_op(":");
    if (!at_op("]") && !at_op(":")) slice->stop = parse_expression();
    if (accept_op(":") && !at_op("]")) slice->step = parse_expression();
    expect_op("]");
    return slice;
  }

  void parse_arguments(Arguments& args) {
    expect_op("(");
    while (!accept_op(")")) {
      if (!args.positional.empty() || !args.keyword.empty()) {
        expect_op(",");
        if (accept_op(")")) break;
      }
      if (peek().type == TokenType::name && at_op("=", 1)) {
        std::string name = next().value;
        next();
        args.keyword.emplace_back(std::move(name), parse_expression());
      } else {
        if (!args.keyword.empty()) fail("positional argument after keyword argument", peek().line);
        args.positional.push_back(parse_expression());
      }
    }
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto call = std::make_unique<CallExpr>(std::move(callee), peek().line);
    parse_arguments(call->args);
    return call;
  }

  std::unique_ptr<FilterExpr> parse_filter(ExprPtr input) {
    int line = peek().line;
    std::string name = expect_name();
    while (accept_op(".")) name.append(1, '.').append(expect_name());
    if (!is_known_filter(name)) fail(fmt::format("unknown filter '{}'", name), line);
    auto filter = std::make_unique<FilterExpr>(std::move(input), std::move(name), line);
    if (at_op("(")) parse_arguments(filter->args);
    return filter;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (accept_op("|")) {
        node = parse_filter(std::move(node));
      } else if (at_name("is")) {
        int line = next().line;
        bool negated = accept_name("not");
        std::string name = expect_name();
        if (!is_known_test(name)) fail(fmt::format("unknown test '{}'", name), line);
        auto test = std::make_unique<TestExpr>(std::move(node), std::move(name), line);
        test->negated = negated;
        if (at_op("(")) {
          parse_arguments(test->args);
        } else if (takes_bare_test_argument()) {
          test->args.positional.push_back(parse_postfix(parse_primary()));
        }
        node = std::move(test);
      } else if (at_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  // `x is divisibleby 3`, `x is sameas none`: a test may take one argument without parentheses.
  bool takes_bare_test_argument() const {
    const Token& t = peek();
    if (t.type == TokenType::name) {
      static const std::set<std::string, std::less<>> kKeywords = {"else", "or", "and", "if",
                                                                   "not",  "in", "is"};
      return !kKeywords.count(t.value);
    }
    if (t.type == TokenType::string || t.type == TokenType::integer || t.type == TokenType::floating)
      return true;
    return at_op("[") || at_op("{");
  }

  std::vector<Token> tokens_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Program parse_program(std::string_view source) {
  return Parser(tokenize(source)).run();
}

}  // namespace graft::jinja

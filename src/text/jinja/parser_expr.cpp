// Expression parsing, following jinja2/parser.py rule by rule.
#include <algorithm>

#include "text/jinja/builtins.h"
#include "text/jinja/parser.h"

namespace graft::text::jinja {

bool Parser::is_name_in(const std::vector<std::string>& names) const {
  if (cur().type != Tok::Name) return false;
  for (const auto& n : names)
    if (cur().text == n) return true;
  return false;
}

bool Parser::skip_op(std::string_view op) {
  if (!is_op(op)) return false;
  next();
  return true;
}

bool Parser::skip_name(std::string_view n) {
  if (!is_name(n)) return false;
  next();
  return true;
}

// Every expression tree is at most this high: evaluating it and destroying it recurse once per
// level, so an unbounded chain (`x|f|f|...`, `a~a~...`, `x.a.b...`) would overflow the stack.
constexpr int kMaxExprDepth = 256;

ExprPtr Parser::bounded(ExprPtr e) {
  int d = 0;
  for (const auto& a : e->args)
    if (a) d = std::max(d, a->depth);
  for (const auto& kv : e->kwargs)
    if (kv.second) d = std::max(d, kv.second->depth);
  e->depth = d + 1;
  if (e->depth > kMaxExprDepth)
    syntax_fail(e->line, 0, "expression nested or chained too deeply (more than " + std::to_string(kMaxExprDepth) +
                                " levels of operators, filters, calls or attributes)");
  return e;
}

void Parser::error(const Token& at, const std::string& msg) const { syntax_fail(at.line, at.col, msg); }

void Parser::unexpected(const std::string& expected) const {
  error(cur(), "expected " + expected + ", got " + describe(cur()));
}

void Parser::expect_op(std::string_view op) {
  if (!skip_op(op)) unexpected("'" + std::string(op) + "'");
}

const Token& Parser::expect_name() {
  if (cur().type != Tok::Name) unexpected("a name");
  return next();
}

void Parser::expect(Tok type) {
  if (cur().type != type) {
    Token want;
    want.type = type;
    unexpected(describe(want));
  }
  next();
}

ExprPtr Parser::binary(std::string op, ExprPtr a, ExprPtr b, int line) {
  auto e = std::make_unique<Expr>(Expr::Kind::Binary, line);
  e->name = std::move(op);
  e->args.push_back(std::move(a));
  e->args.push_back(std::move(b));
  return bounded(std::move(e));
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  return with_condexpr ? parse_condexpr() : parse_or();
}

bool Parser::is_tuple_end(const std::vector<std::string>& extra_end) const {
  if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_op(")")) return true;
  return is_name_in(extra_end);
}

ExprPtr Parser::parse_tuple(bool simplified, bool with_condexpr, const std::vector<std::string>& extra_end,
                            bool explicit_parens) {
  int line = cur().line;
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) expect_op(",");
    if (is_tuple_end(extra_end)) break;
    if (simplified) args.push_back(parse_primary());
    else args.push_back(parse_expression(with_condexpr));
    if (is_op(",")) is_tuple = true;
    else break;
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parens) unexpected("an expression");
  }
  auto e = std::make_unique<Expr>(Expr::Kind::Tuple, line);
  e->args = std::move(args);
  return bounded(std::move(e));
}

ExprPtr Parser::parse_condexpr() {
  int line = cur().line;
  ExprPtr expr1 = parse_or();
  while (skip_name("if")) {
    ExprPtr expr2 = parse_or();
    ExprPtr expr3;
    if (skip_name("else")) expr3 = parse_condexpr();
    auto e = std::make_unique<Expr>(Expr::Kind::Cond, line);
    e->args.push_back(std::move(expr2));
    e->args.push_back(std::move(expr1));
    e->args.push_back(std::move(expr3));
    expr1 = bounded(std::move(e));
    line = cur().line;
  }
  return expr1;
}

ExprPtr Parser::parse_or() {
  int line = cur().line;
  ExprPtr left = parse_and();
  while (skip_name("or")) {
    left = binary("or", std::move(left), parse_and(), line);
    line = cur().line;
  }
  return left;
}

ExprPtr Parser::parse_and() {
  int line = cur().line;
  ExprPtr left = parse_not();
  while (skip_name("and")) {
    left = binary("and", std::move(left), parse_not(), line);
    line = cur().line;
  }
  return left;
}

namespace {
struct DepthGuard {
  int& depth;
  DepthGuard(int& d, const Token& at) : depth(d) {
    if (++depth > 200) syntax_fail(at.line, at.col, "expression nested too deeply");
  }
  ~DepthGuard() { --depth; }
};
}  // namespace

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(unary_depth_, cur());
    int line = next().line;
    auto e = std::make_unique<Expr>(Expr::Kind::Unary, line);
    e->name = "not";
    e->args.push_back(parse_not());
    return bounded(std::move(e));
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  int line = cur().line;
  ExprPtr expr = parse_math1();
  std::unique_ptr<Expr> cmp;
  while (true) {
    std::string op;
    if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                  cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
      op = next().text;
    } else if (skip_name("in")) {
      op = "in";
    } else if (is_name("not") && look().type == Tok::Name && look().text == "in") {
      next();
      next();
      op = "notin";
    } else {
      break;
    }
    if (!cmp) {
      cmp = std::make_unique<Expr>(Expr::Kind::Compare, line);
      cmp->args.push_back(std::move(expr));
    }
    cmp->ops.push_back(op);
    cmp->args.push_back(parse_math1());
  }
  return cmp ? bounded(std::move(cmp)) : std::move(expr);
}

ExprPtr Parser::parse_math1() {
  int line = cur().line;
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    std::string op = next().text;
    left = binary(op, std::move(left), parse_concat(), line);
    line = cur().line;
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  int line = cur().line;
  ExprPtr left = parse_math2();
  while (skip_op("~")) left = binary("~", std::move(left), parse_math2(), line);
  return left;
}

ExprPtr Parser::parse_math2() {
  int line = cur().line;
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    std::string op = next().text;
    left = binary(op, std::move(left), parse_pow(), line);
    line = cur().line;
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  int line = cur().line;
  ExprPtr left = parse_unary();
  while (skip_op("**")) {
    left = binary("**", std::move(left), parse_unary(), line);
    line = cur().line;
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  int line = cur().line;
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    DepthGuard guard(unary_depth_, cur());
    auto e = std::make_unique<Expr>(Expr::Kind::Unary, line);
    e->name = next().text;
    e->args.push_back(parse_unary(false));
    node = bounded(std::move(e));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  auto lit = [&](Value v) {
    auto e = std::make_unique<Expr>(Expr::Kind::Literal, t.line);
    e->value = std::move(v);
    return e;
  };
  if (t.type == Tok::Name) {
    next();
    if (t.text == "true" || t.text == "True") return lit(Value::boolean(true));
    if (t.text == "false" || t.text == "False") return lit(Value::boolean(false));
    if (t.text == "none" || t.text == "None") return lit(Value::none());
    auto e = std::make_unique<Expr>(Expr::Kind::Name, t.line);
    e->name = t.text;
    return e;
  }
  if (t.type == Tok::String) {
    std::string s;
    int line = t.line;
    while (cur().type == Tok::String) s += next().text;  // adjacent literals concatenate
    auto e = std::make_unique<Expr>(Expr::Kind::Literal, line);
    e->value = Value::string(std::move(s));
    return e;
  }
  if (t.type == Tok::Int) {
    next();
    return lit(Value::integer(t.ival));
  }
  if (t.type == Tok::Float) {
    next();
    return lit(Value::number(t.fval));
  }
  if (is_op("(")) {
    next();
    ExprPtr e = parse_tuple(false, true, {}, true);
    expect_op(")");
    return e;
  }
  if (is_op("[")) return parse_list();
  if (is_op("{")) return parse_dict();
  error(t, "unexpected " + describe(t));
}

ExprPtr Parser::parse_list() {
  auto e = std::make_unique<Expr>(Expr::Kind::List, cur().line);
  expect_op("[");
  while (!is_op("]")) {
    if (!e->args.empty()) expect_op(",");
    if (is_op("]")) break;
    e->args.push_back(parse_expression());
  }
  expect_op("]");
  return bounded(std::move(e));
}

ExprPtr Parser::parse_dict() {
  auto e = std::make_unique<Expr>(Expr::Kind::Dict, cur().line);
  expect_op("{");
  while (!is_op("}")) {
    if (!e->args.empty()) expect_op(",");
    if (is_op("}")) break;
    e->args.push_back(parse_expression());
    expect_op(":");
    e->args.push_back(parse_expression());
  }
  expect_op("}");
  return bounded(std::move(e));
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".") || is_op("[")) node = parse_subscript(std::move(node));
    else if (is_op("(")) node = parse_call(std::move(node));
    else return node;
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|")) node = parse_filter(std::move(node), false);
    else if (is_name("is")) node = parse_test(std::move(node));
    else if (is_op("(")) node = parse_call(std::move(node));
    else return node;
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const Token& t = next();
  if (t.text == ".") {
    const Token& attr = next();
    if (attr.type == Tok::Name) {
      auto e = std::make_unique<Expr>(Expr::Kind::Attr, t.line);
      e->name = attr.text;
      e->args.push_back(std::move(node));
      return bounded(std::move(e));
    }
    if (attr.type != Tok::Int) error(attr, "expected name or number after '.'");
    auto e = std::make_unique<Expr>(Expr::Kind::Item, t.line);
    auto idx = std::make_unique<Expr>(Expr::Kind::Literal, t.line);
    idx->value = Value::integer(attr.ival);
    e->args.push_back(std::move(node));
    e->args.push_back(std::move(idx));
    return bounded(std::move(e));
  }
  ExprPtr sub = parse_subscribed();
  if (is_op(",")) error(cur(), "subscripts with several indices (x[a, b]) are not supported");
  expect_op("]");
  if (sub->kind == Expr::Kind::Slice && sub->args.size() == 4 && !sub->args[0]) {
    sub->args[0] = std::move(node);
    return bounded(std::move(sub));
  }
  auto e = std::make_unique<Expr>(Expr::Kind::Item, t.line);
  e->args.push_back(std::move(node));
  e->args.push_back(std::move(sub));
  return bounded(std::move(e));
}

// Returns an expression, or a Slice node whose args[0] (the subject) is still empty.
ExprPtr Parser::parse_subscribed() {
  int line = cur().line;
  auto slice = std::make_unique<Expr>(Expr::Kind::Slice, line);
  slice->args.push_back(nullptr);
  if (is_op(":")) {
    next();
    slice->args.push_back(nullptr);
  } else {
    ExprPtr node = parse_expression();
    if (!is_op(":")) return node;
    next();
    slice->args.push_back(std::move(node));
  }
  if (is_op(":") || is_op("]") || is_op(",")) slice->args.push_back(nullptr);
  else slice->args.push_back(parse_expression());
  if (skip_op(":")) {
    if (is_op("]") || is_op(",")) slice->args.push_back(nullptr);
    else slice->args.push_back(parse_expression());
  } else {
    slice->args.push_back(nullptr);
  }
  return slice;
}

ExprPtr Parser::parse_call(ExprPtr node) {
  auto e = std::make_unique<Expr>(Expr::Kind::Call, cur().line);
  e->args.push_back(std::move(node));
  parse_call_args(*e);
  return bounded(std::move(e));
}

void Parser::parse_call_args(Expr& into) {
  const Token& open = cur();
  expect_op("(");
  bool require_comma = false;
  while (!is_op(")")) {
    if (require_comma) {
      expect_op(",");
      if (is_op(")")) break;
    }
    if (is_op("*") || is_op("**")) error(cur(), "*args / **kwargs in calls are not supported");
    if (cur().type == Tok::Name && look().type == Tok::Op && look().text == "=") {
      std::string key = next().text;
      next();
      into.kwargs.emplace_back(key, parse_expression());
    } else {
      if (!into.kwargs.empty()) error(open, "invalid syntax for function call expression");
      into.args.push_back(parse_expression());
    }
    require_comma = true;
  }
  expect_op(")");
}

ExprPtr Parser::parse_filter(ExprPtr node, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    const Token& t = expect_name();
    std::string name = t.text;
    while (skip_op(".")) name += "." + expect_name().text;
    switch (filter_status(name)) {
      case Support::Unknown: error(t, "unknown filter '" + name + "'");
      case Support::Unsupported: error(t, "filter '" + name + "' is not supported by graft's chat templates");
      case Support::Yes: break;
    }
    auto e = std::make_unique<Expr>(Expr::Kind::Filter, t.line);
    e->name = name;
    e->args.push_back(std::move(node));
    if (is_op("(")) parse_call_args(*e);
    node = bounded(std::move(e));
  }
  return node;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  const Token& is = next();
  bool negated = skip_name("not");
  const Token& t = expect_name();
  std::string name = t.text;
  while (skip_op(".")) name += "." + expect_name().text;
  switch (test_status(name)) {
    case Support::Unknown: error(t, "unknown test '" + name + "'");
    case Support::Unsupported: error(t, "test '" + name + "' is not supported by graft's chat templates");
    case Support::Yes: break;
  }
  auto e = std::make_unique<Expr>(Expr::Kind::Test, is.line);
  e->name = name;
  e->negated = negated;
  e->args.push_back(std::move(node));
  if (is_op("(")) {
    parse_call_args(*e);
  } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
              cur().type == Tok::Float || is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) error(cur(), "you cannot chain multiple tests with 'is'");
    e->args.push_back(parse_postfix(parse_primary()));
  }
  return bounded(std::move(e));
}

}  // namespace graft::text::jinja

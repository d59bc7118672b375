// Jinja parser: a recursive-descent port of jinja2's parser (same precedence, same tuple/test/
// filter rules) producing the syntax tree in ast.h. Unknown tags, filters and tests are syntax
// errors naming the construct and its line, as in jinja2 where they fail at compile time.
#pragma once
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"

namespace graft::text::jinja {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}
  Body parse_template();

 private:
  std::vector<Token> toks_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  int unary_depth_ = 0;  // bounds `- - - x` / `not not x` recursion
  std::vector<std::string> open_tags_;  // for "missing end tag" messages

  // token stream
  const Token& cur() const { return toks_[pos_]; }
  const Token& look() const { return toks_[pos_ + 1 < toks_.size() ? pos_ + 1 : pos_]; }
  const Token& next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }
  bool is_op(std::string_view op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == Tok::Name && cur().text == n; }
  bool is_name_in(const std::vector<std::string>& names) const;
  bool skip_op(std::string_view op);
  bool skip_name(std::string_view n);
  void expect_op(std::string_view op);
  const Token& expect_name();
  void expect(Tok type);
  [[noreturn]] void error(const Token& at, const std::string& msg) const;
  [[noreturn]] void unexpected(const std::string& expected) const;

  // expressions (parser_expr.cpp)
  ExprPtr parse_expression(bool with_condexpr = true);
  ExprPtr parse_tuple(bool simplified = false, bool with_condexpr = true,
                      const std::vector<std::string>& extra_end = {}, bool explicit_parens = false);
  bool is_tuple_end(const std::vector<std::string>& extra_end) const;
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter = true);
  ExprPtr parse_primary();
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  ExprPtr parse_call(ExprPtr node);
  void parse_call_args(Expr& into);
  ExprPtr parse_filter(ExprPtr node, bool start_inline);
  ExprPtr parse_test(ExprPtr node);
  // Sets e->depth from its children; a syntax error past the depth limit.
  static ExprPtr bounded(ExprPtr e);
  static ExprPtr binary(std::string op, ExprPtr a, ExprPtr b, int line);

  // statements (parser_stmt.cpp)
  Body subparse(const std::vector<std::string>& end_tags);
  Body parse_statements(const std::vector<std::string>& end_tags, bool drop_needle);
  NodePtr parse_statement();
  NodePtr parse_for();
  NodePtr parse_if();
  NodePtr parse_set();
  NodePtr parse_macro();
  NodePtr parse_with();
  NodePtr parse_filter_block();
  Target parse_assign_target(bool with_namespace, const std::vector<std::string>& extra_end);
};

}  // namespace graft::text::jinja

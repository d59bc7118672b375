// Jinja lexer: splits template source into data and tag tokens the way jinja2's lexer does with
// trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False (the environment transformers
// renders chat templates with), including {%- -%} / {%+ +%} whitespace control, comments and
// {% raw %} blocks.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace graft::text::jinja {

enum class Tok { Data, BlockBegin, BlockEnd, VarBegin, VarEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type = Tok::Eof;
  std::string text;  // data, name, operator, or the decoded string literal
  int64_t ival = 0;
  double fval = 0;
  int line = 1;
  int col = 1;
};

// Throws graft::Error naming line and column on a lexing error.
std::vector<Token> lex(std::string_view source);

// Human-readable description of a token for error messages.
std::string describe(const Token& t);

[[noreturn]] void syntax_fail(int line, int col, const std::string& msg);

}  // namespace graft::text::jinja

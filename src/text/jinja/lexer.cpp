#include "text/jinja/lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "graft/core/error.h"
#include "text/jinja/strutil.h"

namespace graft::text::jinja {

void syntax_fail(int line, int col, const std::string& msg) {
  fail("chat template syntax error at line ", line, ", column ", col, ": ", msg);
}

std::string describe(const Token& t) {
  switch (t.type) {
    case Tok::Data: return "template data";
    case Tok::BlockBegin: return "'{%'";
    case Tok::BlockEnd: return "end of statement block";
    case Tok::VarBegin: return "'{{'";
    case Tok::VarEnd: return "end of print statement";
    case Tok::Name: return "'" + t.text + "'";
    case Tok::String: return "string literal";
    case Tok::Int:
    case Tok::Float: return "number";
    case Tok::Op: return "'" + t.text + "'";
    case Tok::Eof: return "end of template";
  }
  return "?";
}

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || static_cast<unsigned char>(c) >= 0x80;
}
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    // Normalize \r\n and \r to \n and drop one trailing newline (keep_trailing_newline=False).
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) root_step();
    Token eof = make(Tok::Eof, src_.size());
    out_.push_back(eof);
    return std::move(out_);
  }

 private:
  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;
  size_t pos_ = 0;
  bool line_starting_ = true;

  Token make(Tok type, size_t at, std::string text = {}) const {
    Token t;
    t.type = type;
    t.text = std::move(text);
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), at);
    t.line = static_cast<int>(it - line_starts_.begin());
    t.col = static_cast<int>(at - line_starts_[t.line - 1]) + 1;
    return t;
  }
  [[noreturn]] void error_at(size_t at, const std::string& msg) const {
    Token t = make(Tok::Eof, at);
    syntax_fail(t.line, t.col, msg);
  }
  bool at(size_t p, std::string_view s) const { return src_.compare(p, s.size(), s) == 0; }
  size_t skip_space(size_t p) const {
    while (p < src_.size()) {
      size_t q = p;
      if (!is_py_space(utf8_next(src_, q))) break;
      p = q;
    }
    return p;
  }

  // Applies {%- / lstrip_blocks to the text before a tag and emits it.
  void emit_text(size_t begin, size_t end, char sign, bool lstrip_ok) {
    std::string text = src_.substr(begin, end - begin);
    if (sign == '-') {
      text = py_strip(text, false, true);
    } else if (sign != '+' && lstrip_ok) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting_) {
        bool all_space = l_pos < text.size();
        for (size_t i = l_pos; i < text.size() && all_space;) all_space = is_py_space(utf8_next(text, i));
        if (all_space) text.resize(l_pos);
      }
    }
    if (!text.empty()) out_.push_back(make(Tok::Data, begin, std::move(text)));
  }

  // Matches `{%[-+]? raw [-]?%}` at p; returns the end or npos.
  size_t match_raw_begin(size_t p, char& sign) const {
    size_t q = p + 2;
    sign = 0;
    if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
    q = skip_space(q);
    if (!at(q, "raw")) return std::string::npos;
    q = skip_space(q + 3);
    if (at(q, "-%}")) return skip_space(q + 3);
    if (at(q, "%}")) return q + 2;
    return std::string::npos;
  }

  void root_step() {
    size_t start = pos_;
    while (true) {
      start = src_.find('{', start);
      if (start == std::string::npos || start + 1 >= src_.size()) {
        out_.push_back(make(Tok::Data, pos_, src_.substr(pos_)));
        pos_ = src_.size();
        return;
      }
      char k = src_[start + 1];
      if (k == '{' || k == '%' || k == '#') break;
      ++start;
    }
    char kind = src_[start + 1];
    char sign = start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+') ? src_[start + 2] : 0;
    char raw_sign = 0;
    size_t raw_end = kind == '%' ? match_raw_begin(start, raw_sign) : std::string::npos;
    emit_text(pos_, start, sign, kind != '{');
    if (raw_end != std::string::npos) {
      lex_raw(start, raw_end);
    } else if (kind == '#') {
      lex_comment(start, start + 2 + (sign ? 1 : 0));
    } else {
      lex_tag(start, kind);
    }
  }

  void lex_raw(size_t start, size_t body) {
    line_starting_ = src_[body - 1] == '\n';
    for (size_t p = src_.find("{%", body); p != std::string::npos; p = src_.find("{%", p + 1)) {
      size_t q = p + 2;
      char sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
      q = skip_space(q);
      if (!at(q, "endraw")) continue;
      q = skip_space(q + 6);
      size_t end;
      if (at(q, "+%}")) end = q + 3;
      else if (at(q, "-%}")) end = skip_space(q + 3);
      else if (at(q, "%}")) end = q + 2 + (at(q + 2, "\n") ? 1 : 0);
      else continue;
      emit_text(body, p, sign, true);
      pos_ = end;
      line_starting_ = src_[end - 1] == '\n';
      return;
    }
    error_at(start, "missing end of raw directive");
  }

  void lex_comment(size_t start, size_t body) {
    size_t h = src_.find("#}", body);
    if (h == std::string::npos) error_at(start, "missing end of comment tag");
    size_t end = h + 2;
    char sign = h > body ? src_[h - 1] : 0;
    if (sign == '-') end = skip_space(end);
    else if (sign != '+' && at(end, "\n")) end += 1;
    pos_ = end;
    line_starting_ = end > start && src_[end - 1] == '\n';
  }

  void lex_tag(size_t start, char kind) {
    bool block = kind == '%';
    out_.push_back(make(block ? Tok::BlockBegin : Tok::VarBegin, start, block ? "{%" : "{{"));
    size_t p = start + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    std::vector<char> balance;
    while (true) {
      if (p >= src_.size()) error_at(start, std::string("unexpected end of template inside '") +
                                                (block ? "{%" : "{{") + "' tag (missing '" +
                                                (block ? "%}" : "}}") + "')");
      if (balance.empty()) {
        size_t end = std::string::npos;
        if (block) {
          if (at(p, "+%}")) end = p + 3;
          else if (at(p, "-%}")) end = skip_space(p + 3);
          else if (at(p, "%}")) end = p + 2 + (at(p + 2, "\n") ? 1 : 0);
        } else {
          if (at(p, "-}}")) end = skip_space(p + 3);
          else if (at(p, "}}")) end = p + 2;
        }
        if (end != std::string::npos) {
          out_.push_back(make(block ? Tok::BlockEnd : Tok::VarEnd, p));
          pos_ = end;
          line_starting_ = src_[end - 1] == '\n';
          return;
        }
      }
      size_t q = skip_space(p);
      if (q != p) {
        p = q;
        continue;
      }
      p = lex_expr_token(p, balance);
    }
  }

  // Scans `(\d+_)*\d+`; returns the end or npos.
  size_t scan_digits(size_t p) const {
    if (p >= src_.size() || !is_digit(src_[p])) return std::string::npos;
    while (true) {
      while (p < src_.size() && is_digit(src_[p])) ++p;
      if (p + 1 < src_.size() && src_[p] == '_' && is_digit(src_[p + 1])) {
        ++p;
        continue;
      }
      return p;
    }
  }

  static std::string no_underscores(std::string s) {
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    return s;
  }

  size_t lex_number(size_t p) {
    const size_t npos = std::string::npos;
    if (p == 0 || src_[p - 1] != '.') {  // float: (?<!\.) digits (frac? exp | frac)
      size_t a = scan_digits(p);
      size_t b = npos;
      if (a + 1 < src_.size() && src_[a] == '.') b = scan_digits(a + 1);
      size_t c = b != npos ? b : a;
      size_t e = npos;
      if (c < src_.size() && (src_[c] == 'e' || src_[c] == 'E')) {
        size_t d = c + 1;
        if (d < src_.size() && (src_[d] == '+' || src_[d] == '-')) ++d;
        e = scan_digits(d);
      }
      size_t end = e != npos ? e : b;
      if (end != npos) {
        Token t = make(Tok::Float, p, src_.substr(p, end - p));
        t.fval = std::strtod(no_underscores(t.text).c_str(), nullptr);
        out_.push_back(std::move(t));
        return end;
      }
    }
    int base = 10;
    size_t q = p;
    char x = p + 1 < src_.size() ? static_cast<char>(src_[p + 1] | 0x20) : 0;
    auto valid = [&](char c) {
      c = static_cast<char>(c | 0x20);
      if (base == 2) return c == '0' || c == '1';
      if (base == 8) return c >= '0' && c <= '7';
      if (base == 16) return is_digit(c) || (c >= 'a' && c <= 'f');
      return is_digit(c);
    };
    if (src_[p] == '0' && (x == 'b' || x == 'o' || x == 'x')) {
      base = x == 'b' ? 2 : x == 'o' ? 8 : 16;
      size_t r = p + 2;
      while (r < src_.size()) {
        size_t s = r + (src_[r] == '_' ? 1 : 0);
        if (s < src_.size() && valid(src_[s])) r = s + 1;
        else break;
      }
      if (r > p + 2) q = r;
      else base = 10;  // `0b` with no digits: the literal is `0`, followed by a name
    }
    if (q == p) {  // decimal: [1-9](_?\d)* | 0(_?0)*
      bool zero = src_[p] == '0';
      q = p + 1;
      while (q < src_.size()) {
        size_t s = q + (src_[q] == '_' ? 1 : 0);
        if (s < src_.size() && (zero ? src_[s] == '0' : is_digit(src_[s]))) q = s + 1;
        else break;
      }
    }
    Token t = make(Tok::Int, p, src_.substr(p, q - p));
    std::string digits = no_underscores(t.text);
    if (base != 10) digits = digits.substr(2);
    errno = 0;
    char* endp = nullptr;
    unsigned long long v = std::strtoull(digits.c_str(), &endp, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
      error_at(p, "integer literal too large: " + t.text);
    t.ival = static_cast<int64_t>(v);
    out_.push_back(std::move(t));
    return q;
  }

  size_t lex_string(size_t p) {
    char q = src_[p];
    std::string out;
    size_t i = p + 1;
    while (i < src_.size() && src_[i] != q) {
      if (src_[i] != '\\') {
        out += src_[i++];
        continue;
      }
      if (i + 1 >= src_.size()) break;
      char e = src_[i + 1];
      i += 2;
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + n > src_.size()) error_at(p, std::string("truncated \\") + e + " escape in string literal");
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            char c = static_cast<char>(src_[i + k] | 0x20);
            if (!is_digit(c) && !(c >= 'a' && c <= 'f'))
              error_at(p, std::string("truncated \\") + e + " escape in string literal");
            cp = cp * 16 + (is_digit(c) ? c - '0' : c - 'a' + 10);
          }
          i += n;
          if (cp >= 0xd800 && cp <= 0xdbff && at(i, "\\u")) {  // surrogate pair
            uint32_t lo = static_cast<uint32_t>(std::strtoul(src_.substr(i + 2, 4).c_str(), nullptr, 16));
            if (lo >= 0xdc00 && lo <= 0xdfff) {
              cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
              i += 6;
            }
          }
          if (cp > 0x10ffff) error_at(p, "illegal Unicode character in string literal");
          append_utf8(out, cp);
          break;
        }
        case 'N': error_at(p, "\\N{...} escapes are not supported in string literals");
        default:
          if (e >= '0' && e <= '7') {  // up to three octal digits
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k)
              cp = cp * 8 + static_cast<uint32_t>(src_[i++] - '0');
            append_utf8(out, cp);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    if (i >= src_.size()) error_at(p, "unterminated string literal");
    out_.push_back(make(Tok::String, p, std::move(out)));
    return i + 1;
  }

  size_t lex_expr_token(size_t p, std::vector<char>& balance) {
    char c = src_[p];
    if (is_digit(c)) return lex_number(p);
    if (is_name_start(c)) {
      size_t q = p;
      while (q < src_.size() && is_name_char(src_[q])) ++q;
      out_.push_back(make(Tok::Name, p, src_.substr(p, q - p)));
      return q;
    }
    if (c == '\'' || c == '"') return lex_string(p);
    static const char* const two[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : two)
      if (at(p, op)) {
        out_.push_back(make(Tok::Op, p, op));
        return p + 2;
      }
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos)
      error_at(p, std::string("unexpected char '") + c + "'");
    if (c == '(' || c == '[' || c == '{') {
      if (balance.size() >= 200) error_at(p, "brackets nested too deeply");
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) error_at(p, std::string("unexpected '") + c + "'");
      if (balance.back() != c) error_at(p, std::string("unexpected '") + c + "', expected '" + balance.back() + "'");
      balance.pop_back();
    }
    out_.push_back(make(Tok::Op, p, std::string(1, c)));
    return p + 1;
  }
};

}  // namespace

std::vector<Token> lex(std::string_view source) { return Lexer(source).run(); }

}  // namespace graft::text::jinja

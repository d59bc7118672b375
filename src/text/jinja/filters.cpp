// jinja2's builtin filters (and transformers' tojson), with jinja2 3.1 semantics.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "text/jinja/builtins.h"
#include "text/jinja/strutil.h"

namespace graft::text::jinja {

namespace {

using FilterFn = Value (*)(const Value&, const CallArgs&);

// Sort/unique key: attribute path, lower-cased for strings unless case sensitive.
Value sort_key(const Value& item, const Value& attribute, bool case_sensitive) {
  Value k = attribute.is_none() || attribute.is_undefined() ? item : get_attr_path(item, attribute);
  if (!case_sensitive && k.is_string()) return Value::string(py_lower(k.as_string()));
  return k;
}

Value f_length(const Value& v, const CallArgs& a) {
  bind(a, "length", {}, 0);
  switch (v.kind()) {
    case Value::Kind::Undefined: return Value::integer(0);
    case Value::Kind::String: return Value::integer(static_cast<int64_t>(utf8_length(v.as_string())));
    case Value::Kind::List:
    case Value::Kind::Tuple: return Value::integer(static_cast<int64_t>(v.as_list().size()));
    case Value::Kind::Dict:
      if (v.is_mapping()) return Value::integer(static_cast<int64_t>(v.as_dict().items.size()));
      [[fallthrough]];
    default: runtime_fail("object of type '" + v.type_name() + "' has no len()");
  }
}

Value f_default(const Value& v, const CallArgs& a) {
  Bound b = bind(a, "default", {"default_value", "boolean"}, 0);
  Value dflt = b.has(0) ? b[0] : Value::string("");
  if (v.is_undefined() || (b[1].truthy() && !v.truthy())) return dflt;
  return v;
}

// An indentation given as a number: that many spaces (negative: none), at most 1000.
std::string spaces(const Value& width, const char* what) {
  const int64_t n = to_index(width, what);
  if (n > 1000) runtime_fail(std::string(what) + " " + std::to_string(n) + " is too large (at most 1000)");
  return std::string(static_cast<size_t>(std::max<int64_t>(0, n)), ' ');
}

Value f_tojson(const Value& v, const CallArgs& a) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  Bound b = bind(a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}, 0);
  JsonOptions o;
  o.ensure_ascii = b[0].truthy();
  o.sort_keys = b[3].truthy();
  if (b.has(1) && !b[1].is_none()) {
    o.pretty = true;
    o.item_sep = ",";
    if (b[1].is_string()) o.indent = b[1].as_string();
    else o.indent = spaces(b[1], "tojson indent");
  }
  if (b.has(2) && !b[2].is_none()) {
    if (!b[2].is_sequence() || b[2].as_list().size() != 2) runtime_fail("tojson separators must be a pair of strings");
    o.item_sep = b[2].as_list()[0].str();
    o.key_sep = b[2].as_list()[1].str();
  }
  return Value::string(to_json(v, o));
}

Value f_first(const Value& v, const CallArgs& a) {
  bind(a, "first", {}, 0);
  ValueList items = v.iterate();
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(const Value& v, const CallArgs& a) {
  bind(a, "last", {}, 0);
  ValueList items = v.iterate();
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_join(const Value& v, const CallArgs& a) {
  Bound b = bind(a, "join", {"d", "attribute"}, 0);
  std::string sep = b.has(0) ? b[0].str() : "";
  std::string out;
  bool first = true;
  for (const auto& item : v.iterate()) {
    if (!first) out += sep;
    first = false;
    out += (b.has(1) && !b[1].is_none() ? get_attr_path(item, b[1]) : item).str();
  }
  return Value::string(out);
}

Value f_replace(const Value& v, const CallArgs& a) {
  Bound b = bind(a, "replace", {"old", "new", "count"}, 2);
  long count = b.has(2) && !b[2].is_none() ? static_cast<long>(to_index(b[2], "count")) : -1;
  return Value::string(py_replace(v.str(), b[0].str(), b[1].str(), count));
}

Value f_trim(const Value& v, const CallArgs& a) {
  Bound b = bind(a, "trim", {"chars"}, 0);
  if (b.has(0) && !b[0].is_none()) {
    std::string chars = b[0].str();
    return Value::string(py_strip(v.str(), true, true, &chars));
  }
  return Value::string(py_strip(v.str(), true, true));
}

Value f_upper(const Value& v, const CallArgs& a) {
  bind(a, "upper", {}, 0);
  return Value::string(py_upper(v.str()));
}

Value f_lower(const Value& v, const CallArgs& a) {
  bind(a, "lower", {}, 0);
  return Value::string(py_lower(v.str()));
}

Value f_capitalize(const Value& v, const CallArgs& a) {
  bind(a, "capitalize", {}, 0);
  auto chars = utf8_chars(v.str());
  if (chars.empty()) return Value::string("");
  std::string rest;
  for (size_t i = 1; i < chars.size(); ++i) rest += chars[i];
  return Value::string(py_upper(chars[0]) + py_lower(rest));
}

Value f_title(const Value& v, const CallArgs& a) {
  bind(a, "title", {}, 0);
  // jinja2: split on runs of [-\s({\[<], upper-case each piece's first char, lower the rest.
  std::string s = v.str(), out;
  bool word_start = true;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = utf8_next(s, i);
    bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || is_py_space(cp);
    append_utf8(out, sep ? cp : word_start ? cp_upper(cp) : cp_lower(cp));
    word_start = sep;
  }
  return Value::string(out);
}

Value f_string(const Value& v, const CallArgs& a) {
  bind(a, "string", {}, 0);
  return Value::string(v.str());
}

// Python float(str): surrounding whitespace allowed, digits with single underscores, inf/nan.
bool parse_py_float(const std::string& text, double& out) {
  std::string s = py_strip(text, true, true), clean;
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1])))
        return false;
      continue;
    }
    clean += s[i];
  }
  std::string low = py_lower(clean);
  size_t sign = (low[0] == '+' || low[0] == '-') ? 1 : 0;
  std::string body = low.substr(sign);
  if (body == "inf" || body == "infinity" || body == "nan") {
    out = body == "nan" ? NAN : (low[0] == '-' ? -INFINITY : INFINITY);
    return true;
  }
  if (body.empty() || body.find_first_not_of("0123456789.e+-") != std::string::npos || body.find("0x") == 0)
    return false;
  char* end = nullptr;
  out = std::strtod(clean.c_str(), &end);
  return end && *end == '\0';
}

Value f_int(const Value& v, const CallArgs& a) {
  Bound b = bind(a, "int", {"default", "base"}, 0);
  Value dflt = b.has(0) ? b[0] : Value::integer(0);
  require_defined(v);
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  double d;
  if (v.is_float()) d = v.as_double();
  else if (v.is_string()) {
    int64_t base = b.has(1) ? to_index(b[1], "base") : 10;
    std::string s = py_strip(v.as_string(), true, true), clean;
    for (char c : s)
      if (c != '_') clean += c;
    if (!clean.empty()) {
      size_t start = (clean[0] == '+' || clean[0] == '-') ? 1 : 0;
      std::string digits = clean.substr(start);
      std::string low = py_lower(digits);
      int use_base = static_cast<int>(base);
      if (low.size() > 2 && low[0] == '0' && ((base == 16 && low[1] == 'x') || (base == 8 && low[1] == 'o') ||
                                              (base == 2 && low[1] == 'b')))
        digits = digits.substr(2);
      char* end = nullptr;
      errno = 0;
      long long r = digits.empty() || digits[0] == '+' || digits[0] == '-' ? 0 : std::strtoll(digits.c_str(), &end, use_base);
      if (end && *end == '\0' && errno == 0) return Value::integer(clean[0] == '-' ? -r : r);
    }
    if (!parse_py_float(v.as_string(), d)) return dflt;
  } else {
    return dflt;
  }
  if (std::isnan(d) || std::isinf(d) || std::fabs(d) >= 9.2e18) return dflt;
  return Value::integer(static_cast<int64_t>(d));
}

Value f_float(const Value& v, const CallArgs& a) {
  Bound b = bind(a, "float", {"default"}, 0);
  Value dflt = b.has(0) ? b[0] : Value::number(0.0);
  require_defined(v);
  if (v.is_number()) return Value::number(v.as_double());
  double d;
  if (v.is_string() && parse_py_float(v.as_string(), d)) return Value::number(d);
  return dflt;
}

Value f_items(const Value& v, const CallArgs& a) {
  bind(a, "items", {}, 0);
  if (v.is_undefined()) return Value::list({});
  if (!v.is_mapping()) runtime_fail("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, e] : v.as_dict().items) out.push_back(Value::tuple({k, e}));
  return Value::list(std::move(out));
}

Value f_dictsort(const Value& v, const CallArgs& a) {
  Bound b = bind(a, "dictsort", {"case_sensitive", "by", "reverse"}, 0);
  if (!v.is_mapping()) runtime_fail("dictsort needs a mapping, got " + v.type_name());
  std::string by = b.has(1) ? b[1].str() : "key";
  if (by != "key" && by != "value") runtime_fail("You can only sort by either \"key\" or \"value\"");
  size_t pos = by == "key" ? 0 : 1;
  ValueList items = f_items(v, {}).as_list();
  bool cs = b[0].truthy(), rev = b[2].truthy();
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    Value kx = sort_key(x.as_list()[pos], Value::none(), cs), ky = sort_key(y.as_list()[pos], Value::none(), cs);
    return rev ? compare(ky, kx) < 0 : compare(kx, ky) < 0;
  });
  return Value::list(std::move(items));
}

Value f_list(const Value& v, const CallArgs& a) {
  bind(a, "list", {}, 0);
  return Value::list(v.iterate());
}

Value f_reverse(const Value& v, const CallArgs& a) {
  bind(a, "reverse", {}, 0);
  if (v.is_string()) {
    auto chars = utf8_chars(v.as_string());
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
    return Value::string(out);
  }
  ValueList items = v.iterate();
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_sort(const Value& v, const CallArgs& a) {
  Bound b = bind(a, "sort", {"reverse", "case_sensitive", "attribute"}, 0);
  ValueList items = v.iterate();
  bool rev = b[0].truthy(), cs = b[1].truthy();
  Value attr = b.get(2, Value::none());
  if (attr.is_string() && attr.as_string().find(',') != std::string::npos)
    runtime_fail("sort(attribute='a,b') with several attributes is not supported");
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    Value kx = sort_key(x, attr, cs), ky = sort_key(y, attr, cs);
    return rev ? compare(ky, kx) < 0 : compare(kx, ky) < 0;
  });
  return Value::list(std::move(items));
}

Value f_unique(const Value& v, const CallArgs& a) {
  Bound b = bind(a, "unique", {"case_sensitive", "attribute"}, 0);
  ValueList out, seen;
  for (const auto& item : v.iterate()) {
    Value k = sort_key(item, b.get(1, Value::none()), b[0].truthy());
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) continue;
    seen.push_back(k);
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value min_max(const Value& v, const CallArgs& a, bool want_max) {
  Bound b = bind(a, want_max ? "max" : "min", {"case_sensitive", "attribute"}, 0);
  ValueList items = v.iterate();
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(items[0], b.get(1, Value::none()), b[0].truthy());
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = sort_key(items[i], b.get(1, Value::none()), b[0].truthy());
    int c = compare(k, best_key);
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}
Value f_min(const Value& v, const CallArgs& a) { return min_max(v, a, false); }
Value f_max(const Value& v, const CallArgs& a) { return min_max(v, a, true); }

Value f_sum(const Value& v, const CallArgs& a) {
  Bound b = bind(a, "sum", {"attribute", "start"}, 0);
  Value total = b.has(1) ? b[1] : Value::integer(0);
  for (const auto& item : v.iterate())
    total = binary_op("+", total, b.has(0) && !b[0].is_none() ? get_attr_path(item, b[0]) : item);
  return total;
}

Value f_abs(const Value& v, const CallArgs& a) {
  bind(a, "abs", {}, 0);
  require_defined(v);
  if (v.is_int() || v.is_bool()) return v.as_int() < 0 ? unary_op("-", v) : Value::integer(v.as_int());
  if (v.is_float()) return Value::number(std::fabs(v.as_double()));
  runtime_fail("bad operand type for abs(): '" + v.type_name() + "'");
}

Value f_round(const Value& v, const CallArgs& a) {
  Bound b = bind(a, "round", {"precision", "method"}, 0);
  int64_t prec = b.has(0) ? to_index(b[0], "precision") : 0;
  std::string method = b.has(1) ? b[1].str() : "common";
  if (method != "common" && method != "ceil" && method != "floor")
    runtime_fail("method must be 'common', 'ceil' or 'floor'");
  require_defined(v);
  if (!v.is_number()) runtime_fail("round() needs a number, got " + v.type_name());
  if (method == "common") {
    if (!v.is_float()) return Value::integer(v.as_int());  // round(int, n) stays an int for n >= 0
    double d = v.as_double();
    if (prec == 0) return Value::number(std::nearbyint(d));
    if (prec < 0) {  // round(1234.5, -2) == 1200.0 (half to even on the scaled value)
      double scale = std::pow(10.0, static_cast<double>(-prec));
      return Value::number(std::nearbyint(d / scale) * scale);
    }
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::clamp<int64_t>(prec, 0, 300)), d);
    return Value::number(std::strtod(buf, nullptr));
  }
  double scale = std::pow(10.0, static_cast<double>(prec));
  double x = v.as_double() * scale;
  return Value::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_attr(const Value& v, const CallArgs& a) {
  // jinja2's attr() looks up attributes only, never items: {'a': 1}|attr('a') is undefined.
  Bound b = bind(a, "attr", {"name"}, 1);
  require_defined(v);
  std::string name = b[0].str();
  Value m = find_method(v, name);
  if (!m.is_undefined()) return m;
  if (v.is_namespace() || (v.is_dict() && v.as_dict().kind == DictKind::Loop))
    if (const Value* found = v.as_dict().find(name)) return *found;
  return Value::undefined("'" + v.type_name() + " object' has no attribute '" + name + "'");
}

Value f_safe(const Value& v, const CallArgs& a) {
  bind(a, "safe", {}, 0);
  return v;
}

Value f_escape(const Value& v, const CallArgs& a) {
  bind(a, "escape", {}, 0);
  std::string out;
  for (char c : v.str()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value::string(out);
}

Value f_indent(const Value& v, const CallArgs& a) {
  Bound b = bind(a, "indent", {"width", "first", "blank"}, 0);
  std::string ind = !b.has(0) ? "    " : b[0].is_string() ? b[0].as_string()
                                         : spaces(b[0], "indent width");
  std::string s = v.str() + "\n";
  std::vector<std::string> lines;  // str.splitlines on "\n"-terminated text
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  std::string rv;
  if (b[2].truthy()) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : ind + lines[i]);
  }
  if (b[1].truthy()) rv = ind + rv;
  return Value::string(rv);
}

Value f_map(const Value& v, const CallArgs& a) {
  ValueList out;
  auto attr = std::find_if(a.kw.begin(), a.kw.end(), [](const auto& kv) { return kv.first == "attribute"; });
  if (a.pos.empty() && attr != a.kw.end()) {
    Bound b = bind(a, "map", {"attribute", "default"}, 1);
    for (const auto& item : v.iterate()) {
      Value r = get_attr_path(item, b[0]);
      out.push_back(r.is_undefined() && b.has(1) ? b[1] : r);
    }
    return Value::list(std::move(out));
  }
  if (a.pos.empty()) runtime_fail("map() needs a filter name or attribute=");
  std::string name = a.pos[0].str();
  if (filter_status(name) != Support::Yes) runtime_fail("map(): unknown or unsupported filter '" + name + "'");
  CallArgs rest{ValueList(a.pos.begin() + 1, a.pos.end()), a.kw};
  for (const auto& item : v.iterate()) out.push_back(apply_filter(name, item, rest));
  return Value::list(std::move(out));
}

// select/reject/selectattr/rejectattr
Value select_impl(const Value& v, const CallArgs& a, bool by_attr, bool keep) {
  size_t skip = by_attr ? 1 : 0;
  if (by_attr && a.pos.empty()) runtime_fail("selectattr/rejectattr need an attribute name");
  std::string test = a.pos.size() > skip ? a.pos[skip].str() : "";
  if (!test.empty() && test_status(test) != Support::Yes) runtime_fail("unknown or unsupported test '" + test + "'");
  CallArgs rest{a.pos.size() > skip + 1 ? ValueList(a.pos.begin() + static_cast<long>(skip) + 1, a.pos.end()) : ValueList{}, a.kw};
  ValueList out;
  for (const auto& item : v.iterate()) {
    Value subject = by_attr ? get_attr_path(item, a.pos[0]) : item;
    bool r = test.empty() ? subject.truthy() : apply_test(test, subject, rest);
    if (r == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_select(const Value& v, const CallArgs& a) { return select_impl(v, a, false, true); }
Value f_reject(const Value& v, const CallArgs& a) { return select_impl(v, a, false, false); }
Value f_selectattr(const Value& v, const CallArgs& a) { return select_impl(v, a, true, true); }
Value f_rejectattr(const Value& v, const CallArgs& a) { return select_impl(v, a, true, false); }

const std::map<std::string, FilterFn, std::less<>>& registry() {
  static const std::map<std::string, FilterFn, std::less<>> filters = {
      {"abs", f_abs},         {"attr", f_attr},             {"capitalize", f_capitalize}, {"count", f_length},   {"d", f_default},
      {"default", f_default}, {"dictsort", f_dictsort},     {"e", f_escape},       {"escape", f_escape},
      {"first", f_first},     {"float", f_float},           {"indent", f_indent},  {"int", f_int},
      {"items", f_items},     {"join", f_join},             {"last", f_last},      {"length", f_length},
      {"list", f_list},       {"lower", f_lower},           {"map", f_map},        {"max", f_max},
      {"min", f_min},         {"reject", f_reject},         {"rejectattr", f_rejectattr},
      {"replace", f_replace}, {"reverse", f_reverse},       {"round", f_round},    {"safe", f_safe},
      {"select", f_select},   {"selectattr", f_selectattr}, {"sort", f_sort},      {"string", f_string},
      {"sum", f_sum},         {"title", f_title},           {"tojson", f_tojson},  {"trim", f_trim},
      {"unique", f_unique},   {"upper", f_upper}};
  return filters;
}

}  // namespace

Support filter_status(std::string_view name) {
  if (registry().count(name)) return Support::Yes;
  static const std::set<std::string, std::less<>> jinja_builtins = {
      "batch", "center", "filesizeformat", "forceescape", "format", "groupby", "pprint", "random",
      "slice", "striptags", "truncate", "unsafe", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr"};
  return jinja_builtins.count(name) ? Support::Unsupported : Support::Unknown;
}

Value apply_filter(const std::string& name, const Value& subject, const CallArgs& args) {
  auto it = registry().find(name);
  if (it == registry().end()) runtime_fail("filter '" + name + "' is not supported");
  return it->second(subject, args);
}

}  // namespace graft::text::jinja

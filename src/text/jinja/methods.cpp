// Methods of str/dict/list values (as templates call them: message.content.strip()) and the
// global functions templates see (range, namespace, raise_exception, strftime_now, ...).
#include <cctype>
#include <ctime>
#include <set>

#include "text/jinja/builtins.h"
#include "text/jinja/strutil.h"

namespace graft::text::jinja {

namespace {

const std::set<std::string>& python_str_methods() {
  static const std::set<std::string> names = {
      "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
      "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier",
      "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower",
      "lstrip", "maketrans", "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex",
      "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip",
      "swapcase", "title", "translate", "upper", "zfill"};
  return names;
}
const std::set<std::string>& python_dict_methods() {
  static const std::set<std::string> names = {"clear", "copy", "fromkeys", "get", "items", "keys", "pop",
                                              "popitem", "setdefault", "update", "values"};
  return names;
}
const std::set<std::string>& python_list_methods() {
  static const std::set<std::string> names = {"append", "clear", "copy", "count", "extend", "index",
                                              "insert", "pop", "remove", "reverse", "sort"};
  return names;
}

std::string arg_str(const Value& v, const std::string& what) {
  if (!v.is_string()) runtime_fail(what + " must be str, not " + v.type_name());
  return v.as_string();
}

// Code point index of a byte offset.
int64_t cp_index(const std::string& s, size_t byte) { return static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, byte))); }

Value str_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = utf8_next(s, i);
    bool cased = cp_is_upper(cp) || cp_is_lower(cp);
    append_utf8(out, cased ? (prev_cased ? cp_lower(cp) : cp_upper(cp)) : cp);
    prev_cased = cased;
  }
  return Value::string(out);
}

template <typename Pred>
Value str_is(const std::string& s, Pred pred) {
  if (s.empty()) return Value::boolean(false);
  for (size_t i = 0; i < s.size();)
    if (!pred(utf8_next(s, i))) return Value::boolean(false);
  return Value::boolean(true);
}

bool cp_alpha(uint32_t cp) { return (cp < 0x80 && std::isalpha(static_cast<int>(cp))) || cp_is_upper(cp) || cp_is_lower(cp); }
bool cp_digit(uint32_t cp) { return cp >= '0' && cp <= '9'; }

Value case_check(const std::string& s, bool want_upper) {
  bool any = false;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = utf8_next(s, i);
    if (want_upper ? cp_is_lower(cp) : cp_is_upper(cp)) return Value::boolean(false);
    if (want_upper ? cp_is_upper(cp) : cp_is_lower(cp)) any = true;
  }
  return Value::boolean(any);
}

std::vector<std::string> split_lines(const std::string& s, bool keepends) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < s.size();) {
    size_t at = i;
    uint32_t cp = utf8_next(s, i);
    bool brk = cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || (cp >= 0x1c && cp <= 0x1e) ||
               cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!brk) continue;
    if (cp == '\r' && i < s.size() && s[i] == '\n') ++i;
    out.push_back(s.substr(start, (keepends ? i : at) - start));
    start = i;
  }
  if (start < s.size()) out.push_back(s.substr(start));
  return out;
}

Value string_list(std::vector<std::string> parts) {
  ValueList out;
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::list(std::move(out));
}

std::vector<std::string> rsplit(const std::string& s, const std::string* sep, long maxsplit) {
  if (maxsplit < 0) return py_split(s, sep, -1);
  // Split from the right: reverse code points, split, reverse back.
  auto rev = [](const std::string& x) {
    auto chars = utf8_chars(x);
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
    return out;
  };
  std::string rsep = sep ? rev(*sep) : std::string();
  auto parts = py_split(rev(s), sep ? &rsep : nullptr, maxsplit);
  std::vector<std::string> out;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) out.push_back(rev(*it));
  return out;
}

Value call_str_method(const std::string& s, const std::string& name, const CallArgs& a) {
  std::string f = "str." + name;
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    Bound b = bind(a, f, {"chars"}, 0);
    Value chars = b.get(0, Value::none());
    std::string set = chars.is_none() ? "" : arg_str(chars, "chars");
    return Value::string(py_strip(s, name != "rstrip", name != "lstrip", chars.is_none() ? nullptr : &set));
  }
  if (name == "startswith" || name == "endswith") {
    Bound b = bind(a, f, {"prefix", "start", "end"}, 1);
    if (b.has(1) || b.has(2)) runtime_fail(f + "() with start/end arguments is not supported");
    ValueList options = b[0].kind() == Value::Kind::Tuple ? b[0].as_list() : ValueList{b[0]};
    for (const auto& o : options) {
      std::string p = arg_str(o, f + "() argument");
      bool hit = name == "startswith" ? s.compare(0, p.size(), p) == 0
                                      : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
      if (hit) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "split" || name == "rsplit") {
    Bound b = bind(a, f, {"sep", "maxsplit"}, 0);
    Value sep = b.get(0, Value::none());
    long maxsplit = b.has(1) ? static_cast<long>(to_index(b[1], "maxsplit")) : -1;
    std::string sep_s = sep.is_none() ? "" : arg_str(sep, "sep");
    if (!sep.is_none() && sep_s.empty()) runtime_fail("empty separator");
    const std::string* sp = sep.is_none() ? nullptr : &sep_s;
    return string_list(name == "split" ? py_split(s, sp, maxsplit) : rsplit(s, sp, maxsplit));
  }
  if (name == "splitlines") {
    Bound b = bind(a, f, {"keepends"}, 0);
    return string_list(split_lines(s, b[0].truthy()));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    bind(a, f, {}, 0);
    if (name == "upper") return Value::string(py_upper(s));
    if (name == "lower") return Value::string(py_lower(s));
    if (name == "title") return str_title(s);
    auto chars = utf8_chars(s);
    if (chars.empty()) return Value::string("");
    std::string rest;
    for (size_t i = 1; i < chars.size(); ++i) rest += chars[i];
    return Value::string(py_upper(chars[0]) + py_lower(rest));
  }
  if (name == "replace") {
    Bound b = bind(a, f, {"old", "new", "count"}, 2);
    long count = b.has(2) ? static_cast<long>(to_index(b[2], "count")) : -1;
    return Value::string(py_replace(s, arg_str(b[0], "old"), arg_str(b[1], "new"), count));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    Bound b = bind(a, f, {"sub", "start", "end"}, 1);
    if (b.has(1) || b.has(2)) runtime_fail(f + "() with start/end arguments is not supported");
    std::string sub = arg_str(b[0], "substring");
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    }
    size_t p = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
    if (p == std::string::npos) {
      if (name == "index" || name == "rindex") runtime_fail("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(cp_index(s, p));
  }
  if (name == "join") {
    Bound b = bind(a, f, {"iterable"}, 1);
    std::string out;
    bool first = true;
    for (const auto& item : b[0].iterate()) {
      if (!first) out += s;
      first = false;
      out += arg_str(item, "sequence item");
    }
    return Value::string(out);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    Bound b = bind(a, f, {"affix"}, 1);
    std::string p = arg_str(b[0], "argument");
    if (name == "removeprefix" && s.compare(0, p.size(), p) == 0) return Value::string(s.substr(p.size()));
    if (name == "removesuffix" && !p.empty() && s.size() >= p.size() &&
        s.compare(s.size() - p.size(), p.size(), p) == 0)
      return Value::string(s.substr(0, s.size() - p.size()));
    return Value::string(s);
  }
  bind(a, f, {}, 0);
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") return str_is(s, cp_digit);
  if (name == "isalpha") return str_is(s, cp_alpha);
  if (name == "isalnum") return str_is(s, [](uint32_t c) { return cp_alpha(c) || cp_digit(c); });
  if (name == "isspace") return str_is(s, is_py_space);
  if (name == "isupper") return case_check(s, true);
  if (name == "islower") return case_check(s, false);
  runtime_fail("str method '" + name + "' is not supported by graft's chat templates");
}

bool str_method_implemented(const std::string& n) {
  static const std::set<std::string> names = {
      "strip", "lstrip", "rstrip", "startswith", "endswith", "split", "rsplit", "splitlines", "upper",
      "lower", "title", "capitalize", "replace", "find", "rfind", "index", "rindex", "count", "join",
      "removeprefix", "removesuffix", "isdigit", "isdecimal", "isnumeric", "isalpha", "isalnum",
      "isspace", "isupper", "islower"};
  return names.count(n) > 0;
}

}  // namespace

Value find_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) {
    if (str_method_implemented(name)) {
      std::string s = obj.as_string();
      return Value::function("str." + name, [s, name](const CallArgs& a) { return call_str_method(s, name, a); });
    }
    if (python_str_methods().count(name))
      runtime_fail("str method '" + name + "' is not supported by graft's chat templates");
    return Value::undefined();
  }
  if (obj.is_mapping()) {
    const Value self = obj;
    if (name == "items" || name == "keys" || name == "values") {
      return Value::function("dict." + name, [self, name](const CallArgs& a) {
        bind(a, "dict." + name, {}, 0);
        ValueList out;
        for (const auto& [k, v] : self.as_dict().items)
          out.push_back(name == "items" ? Value::tuple({k, v}) : name == "keys" ? k : v);
        return Value::list(std::move(out));
      });
    }
    if (name == "get") {
      return Value::function("dict.get", [self](const CallArgs& a) {
        Bound b = bind(a, "dict.get", {"key", "default"}, 1);
        const Value* v = self.as_dict().find(b[0]);
        return v ? *v : (b.has(1) ? b[1] : Value::none());
      });
    }
    if (python_dict_methods().count(name))
      runtime_fail("dict method '" + name + "' is not supported (template values are immutable)");
    return Value::undefined();
  }
  if (obj.is_sequence()) {
    const Value self = obj;
    if (name == "count" || name == "index") {
      return Value::function("list." + name, [self, name](const CallArgs& a) {
        Bound b = bind(a, "list." + name, {"value"}, 1);
        int64_t n = 0;
        const auto& items = self.as_list();
        for (size_t i = 0; i < items.size(); ++i) {
          if (!equals(items[i], b[0])) continue;
          if (name == "index") return Value::integer(static_cast<int64_t>(i));
          ++n;
        }
        if (name == "index") runtime_fail(b[0].repr() + " is not in list");
        return Value::integer(n);
      });
    }
    if (python_list_methods().count(name))
      runtime_fail("list method '" + name + "' is not supported (template values are immutable)");
  }
  return Value::undefined();
}

std::vector<std::pair<std::string, Value>> global_functions(std::vector<Value>* namespaces) {
  std::vector<std::pair<std::string, Value>> g;
  g.emplace_back("range", Value::function("range", [](const CallArgs& a) {
    Bound b = bind(a, "range", {"start", "stop", "step"}, 1);
    int64_t start = 0, stop, step = 1;
    if (b.has(1)) {
      start = to_index(b[0], "range() argument");
      stop = to_index(b[1], "range() argument");
      if (b.has(2)) step = to_index(b[2], "range() argument");
    } else {
      stop = to_index(b[0], "range() argument");
    }
    if (step == 0) runtime_fail("range() arg 3 must not be zero");
    ValueList out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= 100000) runtime_fail("range too big: the sandbox blocks ranges larger than 100000");
      out.push_back(Value::integer(i));
    }
    return Value::list(std::move(out));
  }));
  auto make_dict = [](const CallArgs& a, const char* fname, DictKind kind) {
    if (a.pos.size() > 1) runtime_fail(std::string(fname) + "() takes at most one positional argument");
    Dict d;
    d.kind = kind;
    if (!a.pos.empty()) {
      if (!a.pos[0].is_mapping()) runtime_fail(std::string(fname) + "() positional argument must be a dict");
      d.items = a.pos[0].as_dict().items;
    }
    for (const auto& [k, v] : a.kw) d.set(Value::string(k), v);
    return Value::dict(std::move(d));
  };
  g.emplace_back("dict", Value::function("dict", [make_dict](const CallArgs& a) {
    return make_dict(a, "dict", DictKind::Plain);
  }));
  g.emplace_back("namespace", Value::function("namespace", [make_dict, namespaces](const CallArgs& a) {
    Value ns = make_dict(a, "namespace", DictKind::Namespace);
    if (namespaces) namespaces->push_back(ns);
    return ns;
  }));
  g.emplace_back("raise_exception", Value::function("raise_exception", [](const CallArgs& a) -> Value {
    Bound b = bind(a, "raise_exception", {"message"}, 1);
    runtime_fail("raise_exception: " + b[0].str());
  }));
  g.emplace_back("strftime_now", Value::function("strftime_now", [](const CallArgs& a) {
    Bound b = bind(a, "strftime_now", {"format"}, 1);
    std::string fmt = arg_str(b[0], "format");
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[512];
    size_t n = fmt.empty() ? 0 : std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
    return Value::string(std::string(buf, n));
  }));
  for (const char* name : {"cycler", "joiner", "lipsum"}) {
    std::string n = name;
    g.emplace_back(n, Value::function(n, [n](const CallArgs&) -> Value {
      runtime_fail("global function '" + n + "' is not supported by graft's chat templates");
    }));
  }
  return g;
}

}  // namespace graft::text::jinja

#include "text/jinja/value.h"

#include <algorithm>
#include <cmath>

#include "text/jinja/strutil.h"

namespace graft::text::jinja {

void runtime_fail(const std::string& msg) { throw RuntimeError(msg); }

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (equals(k, key)) return &v;
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

void Dict::set(const Value& key, Value v) {
  for (auto& [k, old] : items)
    if (equals(k, key)) {
      old = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

const std::shared_ptr<const std::string>& Value::empty_string() {
  static const auto empty = std::make_shared<const std::string>();
  return empty;
}

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::Int;
  v.i_ = i;
  return v;
}
Value Value::number(double f) {
  Value v;
  v.kind_ = Kind::Float;
  v.f_ = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::String;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::list(ValueList items) {
  Value v;
  v.kind_ = Kind::List;
  v.l_ = std::make_shared<ValueList>(std::move(items));
  return v;
}
Value Value::tuple(ValueList items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::Tuple;
  return v;
}
Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::Dict;
  v.d_ = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::function(std::string name, std::function<Value(const CallArgs&)> fn) {
  Value v;
  v.kind_ = Kind::Function;
  v.fn_ = std::make_shared<Function>(Function{std::move(name), std::move(fn)});
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null: return none();
    case T::boolean: return boolean(j.get<bool>());
    case T::number_integer: return integer(j.get<int64_t>());
    case T::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return number(static_cast<double>(u));
      return integer(static_cast<int64_t>(u));
    }
    case T::number_float: return number(j.get<double>());
    case T::string: return string(j.get<std::string>());
    case T::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return list(std::move(items));
    }
    case T::object: {
      Dict d;
      d.items.reserve(j.size());
      for (const auto& [k, e] : j.items()) d.items.emplace_back(string(k), from_json(e));
      return dict(std::move(d));
    }
    default: runtime_fail("unsupported JSON value in template context");
  }
}

double Value::as_double() const {
  switch (kind_) {
    case Kind::Float: return f_;
    case Kind::Int: return static_cast<double>(i_);
    case Kind::Bool: return b_ ? 1.0 : 0.0;
    default: runtime_fail("expected a number, got " + type_name());
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return b_;
    case Kind::Int: return i_ != 0;
    case Kind::Float: return f_ != 0.0;
    case Kind::String: return !s_->empty();
    case Kind::List:
    case Kind::Tuple: return !l_->empty();
    case Kind::Dict: return d_->kind != DictKind::Plain || !d_->items.empty();
    case Kind::Function: return true;
  }
  return false;
}

static void check_depth(int depth) {
  if (depth > 200) runtime_fail("value nesting too deep (recursive structure?)");
}

static std::string repr_at(const Value& v, int depth);

static std::string str_at(const Value& v, int depth) {
  check_depth(depth);
  switch (v.kind()) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.as_bool() ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.as_int());
    case Value::Kind::Float: return float_repr(v.as_double());
    case Value::Kind::String: return v.as_string();
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      bool tuple = v.kind() == Value::Kind::Tuple;
      std::string out = tuple ? "(" : "[";
      const auto& items = v.as_list();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        out += repr_at(items[i], depth + 1);
      }
      if (tuple && items.size() == 1) out += ",";
      out += tuple ? ")" : "]";
      return out;
    }
    case Value::Kind::Dict: {
      const Dict& d = v.as_dict();
      std::string out = "{";
      for (size_t i = 0; i < d.items.size(); ++i) {
        if (i) out += ", ";
        out += repr_at(d.items[i].first, depth + 1) + ": " + repr_at(d.items[i].second, depth + 1);
      }
      out += "}";
      if (d.kind == DictKind::Namespace) return "<Namespace " + out + ">";
      if (d.kind == DictKind::Loop) {
        const Value* idx = d.find("index");
        const Value* len = d.find("length");
        return "<LoopContext " + (idx ? idx->str() : "?") + "/" + (len ? len->str() : "?") + ">";
      }
      return out;
    }
    case Value::Kind::Function: return "<function " + v.as_function().name + ">";
  }
  return "";
}

static std::string repr_at(const Value& v, int depth) {
  if (v.is_string()) return string_repr(v.as_string());
  if (v.is_undefined()) return "Undefined";
  return str_at(v, depth);
}

std::string Value::str() const { return str_at(*this, 0); }
std::string Value::repr() const { return repr_at(*this, 0); }

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return "list";
    case Kind::Tuple: return "tuple";
    case Kind::Dict:
      return d_->kind == DictKind::Namespace ? "Namespace" : d_->kind == DictKind::Loop ? "LoopContext" : "dict";
    case Kind::Function: return "function";
  }
  return "?";
}

ValueList Value::iterate() const {
  switch (kind_) {
    case Kind::Undefined: return {};
    case Kind::List:
    case Kind::Tuple: return *l_;
    case Kind::String: {
      ValueList out;
      for (auto& c : utf8_chars(*s_)) out.push_back(string(std::move(c)));
      return out;
    }
    case Kind::Dict:
      if (d_->kind == DictKind::Plain) {
        ValueList out;
        out.reserve(d_->items.size());
        for (const auto& kv : d_->items) out.push_back(kv.first);
        return out;
      }
      [[fallthrough]];
    default: runtime_fail("'" + type_name() + "' object is not iterable");
  }
}

bool Value::same_object(const Value& o) const {
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::List:
    case Kind::Tuple: return l_ == o.l_;
    case Kind::Dict: return d_ == o.d_;
    case Kind::Function: return fn_ == o.fn_;
    default: return equals(*this, o);
  }
}

bool equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::Undefined:
    case K::None: return true;
    case K::String: return a.as_string() == b.as_string();
    case K::List:
    case K::Tuple: {
      const auto &x = a.as_list(), &y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case K::Dict: {
      if (a.as_dict().kind != DictKind::Plain || b.as_dict().kind != DictKind::Plain)
        return a.same_object(b);
      const auto &x = a.as_dict(), &y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    case K::Function: return a.same_object(b);
    default: return false;
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_sequence() && a.kind() == b.kind()) {
    const auto &x = a.as_list(), &y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals(x[i], y[i])) return compare(x[i], y[i]);
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  runtime_fail("'<' not supported between instances of '" + a.type_name() + "' and '" +
               b.type_name() + "'");
}

static void json_at(std::string& out, const Value& v, const JsonOptions& o, int level) {
  check_depth(level);
  auto newline = [&](int lvl) {
    out += '\n';
    for (int i = 0; i < lvl; ++i) out += o.indent;
  };
  bool pretty = o.pretty;
  switch (v.kind()) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: {
      double d = v.as_double();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d < 0 ? "-Infinity" : "Infinity";
      else out += float_repr(d);
      return;
    }
    case Value::Kind::String: json_quote(out, v.as_string(), o.ensure_ascii); return;
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      const auto& items = v.as_list();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_sep;
        if (pretty) newline(level + 1);
        json_at(out, items[i], o, level + 1);
      }
      if (pretty) newline(level);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      if (v.as_dict().kind != DictKind::Plain) break;
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, e] : v.as_dict().items) {
        std::string key;
        if (k.is_string()) key = k.as_string();
        else if (k.is_bool()) key = k.as_bool() ? "true" : "false";
        else if (k.is_none()) key = "null";
        else if (k.is_number()) key = k.str();
        else runtime_fail("keys must be str, int, float, bool or None, not " + k.type_name());
        entries.emplace_back(std::move(key), &e);
      }
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& x, const auto& y) { return x.first < y.first; });
      if (entries.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += o.item_sep;
        if (pretty) newline(level + 1);
        json_quote(out, entries[i].first, o.ensure_ascii);
        out += o.key_sep;
        json_at(out, *entries[i].second, o, level + 1);
      }
      if (pretty) newline(level);
      out += '}';
      return;
    }
    default: break;
  }
  runtime_fail("Object of type " + v.type_name() + " is not JSON serializable");
}

std::string to_json(const Value& v, const JsonOptions& opts) {
  std::string out;
  json_at(out, v, opts, 0);
  return out;
}

}  // namespace graft::text::jinja

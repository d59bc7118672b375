// Operators, attribute/item/slice access and argument binding.
#include <cmath>
#include <limits>

#include "text/jinja/builtins.h"
#include "text/jinja/strutil.h"

namespace graft::text::jinja {

Bound bind(const CallArgs& args, std::string_view fname, std::initializer_list<std::string_view> params,
           size_t required, std::vector<Value>* extra) {
  Bound b;
  b.v.resize(params.size());
  b.given.assign(params.size(), false);
  std::string f(fname);
  for (size_t i = 0; i < args.pos.size(); ++i) {
    if (i < params.size()) {
      b.v[i] = args.pos[i];
      b.given[i] = true;
    } else if (extra) {
      extra->push_back(args.pos[i]);
    } else {
      runtime_fail(f + "() takes at most " + std::to_string(params.size()) + " argument(s) (" +
                   std::to_string(args.pos.size()) + " given)");
    }
  }
  for (const auto& [key, val] : args.kw) {
    size_t idx = 0;
    for (auto p : params) {
      if (p == key) break;
      ++idx;
    }
    if (idx == params.size()) runtime_fail(f + "() got an unexpected keyword argument '" + key + "'");
    if (b.given[idx]) runtime_fail(f + "() got multiple values for argument '" + key + "'");
    b.v[idx] = val;
    b.given[idx] = true;
  }
  for (size_t i = 0; i < required; ++i)
    if (!b.given[i]) runtime_fail(f + "() missing required argument '" + std::string(params.begin()[i]) + "'");
  return b;
}

void require_defined(const Value& v) {
  if (!v.is_undefined()) return;
  runtime_fail(v.undefined_hint().empty() ? "undefined value used" : v.undefined_hint());
}

int64_t to_index(const Value& v, std::string_view what) {
  require_defined(v);
  if (v.is_int() || v.is_bool()) return v.as_int();
  runtime_fail(std::string(what) + " must be an integer, not '" + v.type_name() + "'");
}

// "'dict object'" as jinja2 names objects in undefined-value messages. (Built by appending: GCC 12
// warns falsely (-Wrestrict) on "literal" + std::string&&.)
static std::string object_desc(const Value& v) {
  std::string s = "'";
  if (v.is_none()) s += "None";
  else if (v.is_namespace()) s += "Namespace object";
  else if (v.is_dict() && v.as_dict().kind == DictKind::Loop) s += "LoopContext object";
  else s += v.type_name() + " object";
  s += "'";
  return s;
}

static Value missing_attr(const Value& obj, const std::string& name) {
  return Value::undefined(object_desc(obj) + " has no attribute '" + name + "'");
}

Value get_attr(const Value& obj, const std::string& name) {
  require_defined(obj);
  Value m = find_method(obj, name);
  if (!m.is_undefined()) return m;
  if (obj.is_dict())
    if (const Value* v = obj.as_dict().find(name)) return *v;
  return missing_attr(obj, name);
}

// Python index normalisation for sequences: negative counts from the end; false if out of range.
static bool normalize_index(int64_t& i, size_t n) {
  if (i < 0) i += static_cast<int64_t>(n);
  return i >= 0 && i < static_cast<int64_t>(n);
}

Value get_item(const Value& obj, const Value& key) {
  require_defined(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(key)) return *v;
  } else if (obj.is_sequence() && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    const auto& items = obj.as_list();
    if (normalize_index(i, items.size())) return items[static_cast<size_t>(i)];
    return Value::undefined(object_desc(obj) + " has no element " + key.repr());
  } else if (obj.is_string() && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    auto chars = utf8_chars(obj.as_string());
    if (normalize_index(i, chars.size())) return Value::string(chars[static_cast<size_t>(i)]);
    return Value::undefined(object_desc(obj) + " has no element " + key.repr());
  }
  if (key.is_string()) {
    Value m = find_method(obj, key.as_string());
    if (!m.is_undefined()) return m;
    return missing_attr(obj, key.as_string());
  }
  return Value::undefined(object_desc(obj) + " has no element " + key.repr());
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  require_defined(obj);
  auto part = [](const Value& v, bool& given) -> int64_t {
    given = !(v.is_none() || v.is_undefined());
    return given ? to_index(v, "slice index") : 0;
  };
  bool has_start, has_stop, has_step;
  int64_t a = part(start, has_start), b = part(stop, has_stop), s = has_step = false;
  s = part(step, has_step);
  if (!has_step) s = 1;
  if (s == 0) runtime_fail("slice step cannot be zero");
  std::vector<std::string> chars;
  size_t n;
  if (obj.is_string()) {
    chars = utf8_chars(obj.as_string());
    n = chars.size();
  } else if (obj.is_sequence()) {
    n = obj.as_list().size();
  } else {
    return Value::undefined(object_desc(obj) + " cannot be sliced");
  }
  // CPython PySlice_AdjustIndices.
  int64_t len = static_cast<int64_t>(n);
  auto adjust = [&](int64_t v, bool given, int64_t dflt) {
    if (!given) return dflt;
    if (v < 0) {
      v += len;
      if (v < 0) v = s < 0 ? -1 : 0;
    } else if (v >= len) {
      v = s < 0 ? len - 1 : len;
    }
    return v;
  };
  a = adjust(a, has_start, s < 0 ? len - 1 : 0);
  b = adjust(b, has_stop, s < 0 ? -1 : len);
  std::vector<size_t> picks;
  for (int64_t i = a; s > 0 ? i < b : i > b; i += s) picks.push_back(static_cast<size_t>(i));
  if (obj.is_string()) {
    std::string out;
    for (size_t i : picks) out += chars[i];
    return Value::string(std::move(out));
  }
  ValueList out;
  out.reserve(picks.size());
  for (size_t i : picks) out.push_back(obj.as_list()[i]);
  return obj.kind() == Value::Kind::Tuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

Value get_attr_path(const Value& obj, const Value& path) {
  if (path.is_int()) return get_item(obj, path);
  std::string p = path.str();
  Value cur = obj;
  size_t start = 0;
  while (true) {
    size_t dot = p.find('.', start);
    std::string part = p.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    cur = digits ? get_item(cur, Value::integer(std::stoll(part))) : get_item(cur, Value::string(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

static std::string operand_error(std::string_view op, const Value& a, const Value& b) {
  return "unsupported operand type(s) for " + std::string(op) + ": '" + a.type_name() + "' and '" +
         b.type_name() + "'";
}

// (Callers compute `overflow` first: argument evaluation order is unspecified.)
static Value int_result(bool overflow, int64_t r, std::string_view op) {
  if (overflow) runtime_fail("integer overflow in '" + std::string(op) + "'");
  return Value::integer(r);
}

static Value repeat(const Value& seq, int64_t times) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    if (times > 0 && seq.as_string().size() * static_cast<size_t>(times) > (1u << 30))
      runtime_fail("string repetition too large");
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.as_string();
    return Value::string(std::move(out));
  }
  if (times > 0 && seq.as_list().size() * static_cast<size_t>(times) > (1u << 24))
    runtime_fail("list repetition too large");
  ValueList out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  return seq.kind() == Value::Kind::Tuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") return Value::string(a.str() + b.str());
  require_defined(a);
  require_defined(b);
  bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  bool nums = a.is_number() && b.is_number();
  int64_t r = 0;
  if (op == "+") {
    if (ints) {
      bool overflow = __builtin_add_overflow(a.as_int(), b.as_int(), &r);
      return int_result(overflow, r, op);
    }
    if (nums) return Value::number(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) return Value::string(a.as_string() + b.as_string());
    if (a.is_sequence() && a.kind() == b.kind()) {
      ValueList out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return a.kind() == Value::Kind::Tuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
  } else if (op == "-") {
    if (ints) {
      bool overflow = __builtin_sub_overflow(a.as_int(), b.as_int(), &r);
      return int_result(overflow, r, op);
    }
    if (nums) return Value::number(a.as_double() - b.as_double());
  } else if (op == "*") {
    if (ints) {
      bool overflow = __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
      return int_result(overflow, r, op);
    }
    if (nums) return Value::number(a.as_double() * b.as_double());
    if ((a.is_string() || a.is_sequence()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_sequence()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
  } else if (op == "/") {
    if (nums) {
      if (b.as_double() == 0) runtime_fail("division by zero");
      return Value::number(a.as_double() / b.as_double());
    }
  } else if (op == "//" || op == "%") {
    if (nums && b.as_double() == 0) runtime_fail(op == "%" ? "modulo by zero" : "integer division or modulo by zero");
    if (ints) {
      int64_t x = a.as_int(), y = b.as_int();
      if (x == std::numeric_limits<int64_t>::min() && y == -1) runtime_fail("integer overflow");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        q -= 1;
        m += y;
      }
      return Value::integer(op == "//" ? q : m);
    }
    if (nums) {  // CPython float_divmod
      double x = a.as_double(), y = b.as_double();
      double m = std::fmod(x, y);
      double div = (x - m) / y;
      if (m != 0) {
        if ((y < 0) != (m < 0)) {
          m += y;
          div -= 1.0;
        }
      } else {
        m = std::copysign(0.0, y);
      }
      if (op == "%") return Value::number(m);
      double fl;
      if (div != 0) {
        fl = std::floor(div);
        if (div - fl > 0.5) fl += 1.0;
      } else {
        fl = std::copysign(0.0, x / y);
      }
      return Value::number(fl);
    }
    if (op == "%" && a.is_string()) runtime_fail("printf-style string formatting ('%' on a string) is not supported");
  } else if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), acc = 1;
      bool overflow = false;
      while (e-- > 0 && !overflow) overflow = __builtin_mul_overflow(acc, base, &acc);
      return int_result(overflow, acc, op);
    }
    if (nums) return Value::number(std::pow(a.as_double(), b.as_double()));
  } else {
    runtime_fail("unknown operator '" + std::string(op) + "'");
  }
  if (op == "+" && a.is_string()) runtime_fail("can only concatenate str (not \"" + b.type_name() + "\") to str");
  runtime_fail(operand_error(op, a, b));
}

Value unary_op(std::string_view op, const Value& a) {
  if (op == "not") return Value::boolean(!a.truthy());
  require_defined(a);
  if (op == "-") {
    if (a.is_int() || a.is_bool()) {
      if (a.as_int() == std::numeric_limits<int64_t>::min()) runtime_fail("integer overflow");
      return Value::integer(-a.as_int());
    }
    if (a.is_float()) return Value::number(-a.as_double());
  } else if (op == "+") {
    if (a.is_int() || a.is_bool()) return Value::integer(a.as_int());
    if (a.is_float()) return a;
  }
  runtime_fail("bad operand type for unary " + std::string(op) + ": '" + a.type_name() + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::Undefined: return false;
    case Value::Kind::String:
      require_defined(item);
      if (!item.is_string())
        runtime_fail("'in <string>' requires string as left operand, not " + item.type_name());
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::List:
    case Value::Kind::Tuple:
      for (const auto& v : container.as_list())
        if (equals(v, item)) return true;
      return false;
    case Value::Kind::Dict:
      if (container.is_mapping()) return container.as_dict().find(item) != nullptr;
      [[fallthrough]];
    default: runtime_fail("argument of type '" + container.type_name() + "' is not iterable");
  }
}

bool compare_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  require_defined(a);
  require_defined(b);
  int c = compare(a, b);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  if (op == ">=") return c >= 0;
  runtime_fail("unknown comparison '" + std::string(op) + "'");
}

}  // namespace graft::text::jinja

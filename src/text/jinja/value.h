// Jinja runtime values with Python semantics: undefined, none, bool, int, float, str, list, tuple,
// dict (insertion-ordered; also namespace() objects and the loop variable) and callables.
// Lists and dicts are shared by reference and never mutated after creation, except namespaces.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace graft::text::jinja {

// A runtime error without a source position yet; the evaluator adds the template line.
struct RuntimeError : std::runtime_error {
  explicit RuntimeError(const std::string& what) : std::runtime_error(what) {}
};
[[noreturn]] void runtime_fail(const std::string& msg);

class Value;
using ValueList = std::vector<Value>;
struct CallArgs;

enum class DictKind { Plain, Namespace, Loop };

struct Dict {
  std::vector<std::pair<Value, Value>> items;  // insertion order, unique keys
  DictKind kind = DictKind::Plain;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(const Value& key, Value v);
};

struct Function {
  std::string name;
  std::function<Value(const CallArgs&)> call;
};

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Function };

  Value() = default;  // undefined
  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(std::string s);
  static Value list(ValueList items);
  static Value tuple(ValueList items);
  static Value dict(Dict d);
  static Value function(std::string name, std::function<Value(const CallArgs&)> fn);
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_sequence() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_mapping() const { return kind_ == Kind::Dict && d_->kind == DictKind::Plain; }
  bool is_namespace() const { return kind_ == Kind::Dict && d_->kind == DictKind::Namespace; }
  bool is_function() const { return kind_ == Kind::Function; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::Bool ? (b_ ? 1 : 0) : i_; }  // int or bool
  double as_double() const;                                                 // any number
  const std::string& as_string() const { return *s_; }
  const ValueList& as_list() const { return *l_; }
  const Dict& as_dict() const { return *d_; }
  Dict& mutable_dict() const { return *d_; }  // namespaces only
  const Function& as_function() const { return *fn_; }
  const std::string& undefined_hint() const { return *s_; }

  bool truthy() const;
  std::string str() const;   // Python str()
  std::string repr() const;  // Python repr()
  std::string type_name() const;  // Python type name: 'str', 'int', 'dict', 'NoneType', ...
  // Items iterated by a for loop / list(): list items, dict keys, string characters; undefined
  // is empty. Errors for values that are not iterable.
  ValueList iterate() const;
  bool same_object(const Value& o) const;  // Python `is`

 private:
  Kind kind_ = Kind::Undefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_ = empty_string();
  std::shared_ptr<ValueList> l_;
  std::shared_ptr<Dict> d_;
  std::shared_ptr<Function> fn_;
  static const std::shared_ptr<const std::string>& empty_string();
};

// Python ==.
bool equals(const Value& a, const Value& b);
// Python ordering (<0, 0, >0) for numbers, strings and sequences; other pairs are an error.
int compare(const Value& a, const Value& b);

struct JsonOptions {
  bool pretty = false;          // json.dumps(indent=...) given: one item per line
  std::string indent;           // per level when pretty
  std::string item_sep = ", ";  // json.dumps defaults; "," when indenting
  std::string key_sep = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// json.dumps(value, ensure_ascii=False, ...) as transformers' tojson filter calls it.
std::string to_json(const Value& v, const JsonOptions& opts);

}  // namespace graft::text::jinja

// What templates can call and apply: operators, attribute/item access, str/dict/list methods,
// filters, tests and global functions, all with jinja2/Python semantics. Errors are RuntimeError
// (the evaluator adds the template line).
#pragma once
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace graft::text::jinja {

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

// Arguments bound to parameter names like a Python call: v[i] is Undefined where not given.
struct Bound {
  std::vector<Value> v;
  std::vector<bool> given;
  const Value& operator[](size_t i) const { return v[i]; }
  bool has(size_t i) const { return given[i]; }
  // The argument, or `dflt` if not given or None.
  Value get(size_t i, Value dflt) const { return given[i] && !v[i].is_none() ? v[i] : dflt; }
};
// Fails on too many positional arguments, unknown or duplicate keywords, or fewer than
// `required` arguments. `extra` (if non-null) receives surplus positional arguments instead.
Bound bind(const CallArgs& args, std::string_view fname, std::initializer_list<std::string_view> params,
           size_t required, std::vector<Value>* extra = nullptr);

// Whether a filter/test name is implemented, a jinja2 builtin graft lacks, or unknown.
enum class Support { Yes, Unsupported, Unknown };
Support filter_status(std::string_view name);
Support test_status(std::string_view name);
Value apply_filter(const std::string& name, const Value& subject, const CallArgs& args);
bool apply_test(const std::string& name, const Value& subject, const CallArgs& args);

// Fails with the undefined value's message ("'x' is undefined") if v is undefined.
void require_defined(const Value& v);
// Python int(x) semantics for an integral argument (int or bool); fails otherwise.
int64_t to_index(const Value& v, std::string_view what);

// obj.name: methods first, then items (jinja2's getattr), Undefined when missing.
Value get_attr(const Value& obj, const std::string& name);
// obj[key]: items first, then attributes (jinja2's getitem), Undefined when missing.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] with Python semantics; parts may be None/Undefined for omitted.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// "." separated attribute path as the attribute= argument of filters takes it.
Value get_attr_path(const Value& obj, const Value& path);
// The bound method obj.name; Undefined if obj has no such method; fails for Python methods
// graft does not implement (never silently wrong).
Value find_method(const Value& obj, const std::string& name);

// + - * / // % ** ~ on two values.
Value binary_op(std::string_view op, const Value& a, const Value& b);
Value unary_op(std::string_view op, const Value& a);
// Python `item in container`.
bool contains(const Value& container, const Value& item);
// == != < <= > >= in notin
bool compare_op(std::string_view op, const Value& a, const Value& b);

// Global functions: range, dict, namespace, raise_exception, strftime_now (and stubs that fail
// for jinja2 globals graft lacks). `namespaces` collects created namespaces so the evaluator can
// break reference cycles after rendering.
std::vector<std::pair<std::string, Value>> global_functions(std::vector<Value>* namespaces);

}  // namespace graft::text::jinja

// jinja2's tests (`x is defined`, `x is string`, selectattr('role', 'equalto', 'user'), ...).
#include <map>
#include <set>

#include "text/jinja/builtins.h"
#include "text/jinja/strutil.h"

namespace graft::text::jinja {

namespace {

using TestFn = bool (*)(const Value&, const Bound&);

bool num_check(const Value& v, const char* test) {
  require_defined(v);
  if (!v.is_number()) runtime_fail(std::string("test '") + test + "' needs a number, got " + v.type_name());
  return true;
}

int64_t int_arg(const Value& v, const char* test) {
  num_check(v, test);
  if (v.is_float()) runtime_fail(std::string("test '") + test + "' needs an integer");
  return v.as_int();
}

bool case_test(const Value& v, bool upper) {
  std::string s = v.str();
  bool any = false;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = utf8_next(s, i);
    if (upper ? cp_is_lower(cp) : cp_is_upper(cp)) return false;
    if (upper ? cp_is_upper(cp) : cp_is_lower(cp)) any = true;
  }
  return any;
}

struct TestDef {
  size_t nargs;  // number of arguments after the subject
  TestFn fn;
};

const std::map<std::string, TestDef, std::less<>>& registry() {
  static const std::map<std::string, TestDef, std::less<>> tests = [] {
    std::map<std::string, TestDef, std::less<>> t;
    t["defined"] = {0, [](const Value& v, const Bound&) { return !v.is_undefined(); }};
    t["undefined"] = {0, [](const Value& v, const Bound&) { return v.is_undefined(); }};
    t["none"] = {0, [](const Value& v, const Bound&) { return v.is_none(); }};
    t["boolean"] = {0, [](const Value& v, const Bound&) { return v.is_bool(); }};
    t["true"] = {0, [](const Value& v, const Bound&) { return v.is_bool() && v.as_bool(); }};
    t["false"] = {0, [](const Value& v, const Bound&) { return v.is_bool() && !v.as_bool(); }};
    t["integer"] = {0, [](const Value& v, const Bound&) { return v.is_int(); }};
    t["float"] = {0, [](const Value& v, const Bound&) { return v.is_float(); }};
    t["number"] = {0, [](const Value& v, const Bound&) { return v.is_number(); }};
    t["string"] = {0, [](const Value& v, const Bound&) { return v.is_string(); }};
    t["mapping"] = {0, [](const Value& v, const Bound&) { return v.is_mapping(); }};
    t["callable"] = {0, [](const Value& v, const Bound&) { return v.is_function(); }};
    t["iterable"] = {0, [](const Value& v, const Bound&) {
                       return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_mapping();
                     }};
    t["sequence"] = {0, [](const Value& v, const Bound&) {
                       return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_mapping();
                     }};
    t["escaped"] = {0, [](const Value&, const Bound&) { return false; }};
    t["odd"] = {0, [](const Value& v, const Bound&) {
                  int64_t i = int_arg(v, "odd");
                  return ((i % 2) + 2) % 2 == 1;
                }};
    t["even"] = {0, [](const Value& v, const Bound&) { return int_arg(v, "even") % 2 == 0; }};
    t["divisibleby"] = {1, [](const Value& v, const Bound& b) {
                          num_check(v, "divisibleby");
                          num_check(b[0], "divisibleby");
                          if (b[0].as_double() == 0) runtime_fail("integer division or modulo by zero");
                          return binary_op("%", v, b[0]).as_double() == 0;
                        }};
    t["lower"] = {0, [](const Value& v, const Bound&) { return case_test(v, false); }};
    t["upper"] = {0, [](const Value& v, const Bound&) { return case_test(v, true); }};
    t["sameas"] = {1, [](const Value& v, const Bound& b) { return v.same_object(b[0]); }};
    t["in"] = {1, [](const Value& v, const Bound& b) { return contains(b[0], v); }};
    const std::pair<const char*, const char*> cmp[] = {
        {"==", "=="}, {"eq", "=="}, {"equalto", "=="}, {"!=", "!="}, {"ne", "!="}, {"<", "<"},
        {"lt", "<"}, {"lessthan", "<"}, {"<=", "<="}, {"le", "<="}, {">", ">"}, {"gt", ">"},
        {"greaterthan", ">"}, {">=", ">="}, {"ge", ">="}};
    for (const auto& [name, op] : cmp) {
      std::string o = op;
      // Captureless lambdas only: dispatch on the operator by name at call time.
      if (o == "==") t[name] = {1, [](const Value& v, const Bound& b) { return compare_op("==", v, b[0]); }};
      if (o == "!=") t[name] = {1, [](const Value& v, const Bound& b) { return compare_op("!=", v, b[0]); }};
      if (o == "<") t[name] = {1, [](const Value& v, const Bound& b) { return compare_op("<", v, b[0]); }};
      if (o == "<=") t[name] = {1, [](const Value& v, const Bound& b) { return compare_op("<=", v, b[0]); }};
      if (o == ">") t[name] = {1, [](const Value& v, const Bound& b) { return compare_op(">", v, b[0]); }};
      if (o == ">=") t[name] = {1, [](const Value& v, const Bound& b) { return compare_op(">=", v, b[0]); }};
    }
    return t;
  }();
  return tests;
}

}  // namespace

Support test_status(std::string_view name) {
  if (registry().count(name)) return Support::Yes;
  if (name == "filter" || name == "test") return Support::Unsupported;
  return Support::Unknown;
}

bool apply_test(const std::string& name, const Value& subject, const CallArgs& args) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    if (test_status(name) == Support::Unsupported)
      runtime_fail("test '" + name + "' is not supported by graft's chat templates");
    runtime_fail("unknown test '" + name + "'");
  }
  static const char* const names[] = {"arg"};
  Bound b = it->second.nargs == 0 ? bind(args, "test " + name, {}, 0)
                                  : bind(args, "test " + name, {names[0]}, 1);
  return it->second.fn(subject, b);
}

}  // namespace graft::text::jinja

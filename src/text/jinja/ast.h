// Jinja syntax tree: expressions and statements as the parser builds them and the evaluator
// walks them. Every node keeps its template line for error messages.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace graft::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,  // value
    Name,     // name
    List,     // args = items
    Tuple,    // args = items
    Dict,     // args = key0, value0, key1, value1, ...
    Attr,     // args[0].name
    Item,     // args[0][args[1]]
    Slice,    // args[0][args[1]:args[2]:args[3]] (null parts omitted)
    Call,     // args[0](args[1..], kwargs)
    Filter,   // args[0] | name(args[1..], kwargs)
    Test,     // args[0] is [not] name(args[1..], kwargs); negated
    Unary,    // op args[0]: "-", "+", "not"
    Binary,   // args[0] op args[1]: + - * / // % ** ~ and or
    Compare,  // args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in notin
    Cond,     // args[1] if args[0] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;  // name, attribute, filter/test name, or operator
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
  int depth = 1;  // height of this subtree (set by the parser, which bounds it)

  Expr(Kind k, int l) : kind(k), line(l) {}
};

// What `for` and `set` assign to: one name, several names (tuple unpacking), or ns.attr.
struct Target {
  std::vector<std::string> names;
  bool is_tuple = false;
  std::string ns_attr;  // non-empty: names[0].ns_attr = ...
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    Text,        // text
    Output,      // {{ expr }}; name == "print": {% print a, b %} with expr a List of the parts
    If,          // conds[i] -> bodies[i]; bodies.size() == conds.size() + 1 when there is an else
    For,         // for target in expr [if cond]: body [else: else_body]
    Set,         // set target = expr
    SetBlock,    // set target: body, optionally piped through filter (expr is a Filter with null subject)
    Macro,       // macro name(params = defaults): body
    Break,
    Continue,
    FilterBlock, // filter expr: body
    With,        // with assignments: body
    Generation,  // transformers' {% generation %}: body
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;  // for-loop filter
  Target target;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::string name;                     // macro name
  std::vector<std::string> params;      // macro params
  std::vector<ExprPtr> defaults;        // macro defaults (null = none)
  std::vector<std::pair<Target, ExprPtr>> assigns;  // with

  Node(Kind k, int l) : kind(k), line(l) {}
};

}  // namespace graft::text::jinja

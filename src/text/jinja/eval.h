// Jinja evaluator: walks the syntax tree with jinja2's scoping (a for-loop iteration, macro call
// or with block opens a scope; if does not), output rules and undefined-value behaviour.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/builtins.h"

namespace graft::text::jinja {

struct Frame {
  std::vector<std::pair<std::string, Value>> vars;
  std::shared_ptr<Frame> parent;
  const Value* find(const std::string& name) const;
  void set(const std::string& name, Value v);
};
using FramePtr = std::shared_ptr<Frame>;

class Evaluator {
 public:
  // Renders `body` with `context` variables (plus the global functions) visible.
  static std::string render(const Body& body, std::vector<std::pair<std::string, Value>> context);

 private:
  enum class Flow { Normal, Break, Continue };

  Flow exec(const Body& body, std::string& out, const FramePtr& frame);
  Flow exec_node(const Node& node, std::string& out, const FramePtr& frame);
  void exec_for(const Node& node, std::string& out, const FramePtr& frame);
  Value eval(const Expr& e, const FramePtr& frame);
  Value eval_inner(const Expr& e, const FramePtr& frame);
  CallArgs eval_args(const Expr& e, size_t first, const FramePtr& frame);
  Value apply_filter_chain(const Expr& filter, Value subject, const FramePtr& frame);
  void assign(const Target& t, const Value& v, Frame& frame);
  Value make_macro(const Node& node, const FramePtr& frame);
  Value make_loop(const ValueList& items, size_t i);

  // Budgets: a template is a program from a stranger (a model download, a server request), so it
  // runs in bounded time and memory. Exceeding one is a kLimit error naming the template line.
  void count_step(int line, int64_t cost = 1);
  void check_size(const Value& v, int line) const;

  FramePtr root_;
  int64_t steps_ = 0;
  std::vector<Value> namespaces_;
  int call_depth_ = 0;
};

}  // namespace graft::text::jinja

#include "text/jinja/eval.h"

#include <algorithm>

#include "graft/core/error.h"

namespace graft::text::jinja {

namespace {
// Well under a second of work; real chat templates take a few thousand steps (about twenty per
// message), so a conversation of ten thousand messages fits many times over.
constexpr int64_t kMaxSteps = 1'000'000;
// Rendered output and any single string value; a long conversation renders to well under 1 MiB.
constexpr size_t kMaxBytes = size_t{32} << 20;
// Items in any single list value.
constexpr size_t kMaxItems = size_t{1} << 20;
}  // namespace

void Evaluator::count_step(int line, int64_t cost) {
  if ((steps_ += cost) > kMaxSteps)
    fail_as(ErrorKind::kLimit, "chat template line ", line, ": the template ran more than ", kMaxSteps,
            " evaluation steps (the budget for one rendering); refusing to run it further");
}

void Evaluator::check_size(const Value& v, int line) const {
  if (v.is_string() && v.as_string().size() > kMaxBytes)
    fail_as(ErrorKind::kLimit, "chat template line ", line, ": a string value grew to ", v.as_string().size(),
            " bytes (limit ", kMaxBytes, ")");
  if (v.is_sequence() && v.as_list().size() > kMaxItems)
    fail_as(ErrorKind::kLimit, "chat template line ", line, ": a list value grew to ", v.as_list().size(),
            " items (limit ", kMaxItems, ")");
}

const Value* Frame::find(const std::string& name) const {
  for (const Frame* f = this; f; f = f->parent.get())
    for (const auto& [k, v] : f->vars)
      if (k == name) return &v;
  return nullptr;
}

void Frame::set(const std::string& name, Value v) {
  for (auto& [k, old] : vars)
    if (k == name) {
      old = std::move(v);
      return;
    }
  vars.emplace_back(name, std::move(v));
}

std::string Evaluator::render(const Body& body, std::vector<std::pair<std::string, Value>> context) {
  Evaluator ev;
  ev.root_ = std::make_shared<Frame>();
  ev.root_->vars = global_functions(&ev.namespaces_);
  for (auto& [k, v] : context) ev.root_->set(k, std::move(v));
  std::string out;
  struct Cleanup {  // namespaces can reference themselves; break such cycles when done
    Evaluator& ev;
    ~Cleanup() {
      for (auto& ns : ev.namespaces_) ns.mutable_dict().items.clear();
      ev.root_->vars.clear();
    }
  } cleanup{ev};
  ev.exec(body, out, ev.root_);
  return out;
}

Evaluator::Flow Evaluator::exec(const Body& body, std::string& out, const FramePtr& frame) {
  for (const auto& node : body) {
    Flow f = exec_node(*node, out, frame);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Evaluator::Flow Evaluator::exec_node(const Node& n, std::string& out, const FramePtr& frame) {
  count_step(n.line);
  try {
    switch (n.kind) {
      case Node::Kind::Text: out += n.text; break;
      case Node::Kind::Output:
        if (n.name == "print") {
          for (const auto& e : n.expr->args) out += eval(*e, frame).str();
        } else {
          out += eval(*n.expr, frame).str();
        }
        break;
      case Node::Kind::If:
        for (size_t i = 0; i < n.bodies.size(); ++i)
          if (i >= n.conds.size() || eval(*n.conds[i], frame).truthy()) return exec(n.bodies[i], out, frame);
        break;
      case Node::Kind::For: exec_for(n, out, frame); break;
      case Node::Kind::Set: assign(n.target, eval(*n.expr, frame), *frame); break;
      case Node::Kind::SetBlock: {
        std::string text;
        exec(n.body, text, frame);
        Value v = Value::string(std::move(text));
        if (n.expr) v = apply_filter_chain(*n.expr, v, frame);
        assign(n.target, v, *frame);
        break;
      }
      case Node::Kind::Macro: frame->set(n.name, make_macro(n, frame)); break;
      case Node::Kind::Break: return Flow::Break;
      case Node::Kind::Continue: return Flow::Continue;
      case Node::Kind::FilterBlock: {
        std::string text;
        exec(n.body, text, frame);
        out += apply_filter_chain(*n.expr, Value::string(std::move(text)), frame).str();
        break;
      }
      case Node::Kind::With: {
        auto inner = std::make_shared<Frame>();
        inner->parent = frame;
        std::vector<Value> values;
        for (const auto& [t, e] : n.assigns) values.push_back(eval(*e, frame));
        for (size_t i = 0; i < values.size(); ++i) assign(n.assigns[i].first, values[i], *inner);
        return exec(n.body, out, inner);
      }
      case Node::Kind::Generation: return exec(n.body, out, frame);
    }
  } catch (const RuntimeError& e) {
    fail("chat template line ", n.line, ": ", e.what());
  }
  // Nodes that append (text, output, filter blocks) end here; those that return recurse into this.
  if (out.size() > kMaxBytes)
    fail_as(ErrorKind::kLimit, "chat template line ", n.line, ": the rendered text grew past ", kMaxBytes, " bytes");
  return Flow::Normal;
}

Value Evaluator::make_loop(const ValueList& items, size_t i) {
  int64_t n = static_cast<int64_t>(items.size()), idx = static_cast<int64_t>(i);
  Dict d;
  d.kind = DictKind::Loop;
  auto put = [&](const char* k, Value v) { d.items.emplace_back(Value::string(k), std::move(v)); };
  put("index0", Value::integer(idx));
  put("index", Value::integer(idx + 1));
  put("revindex", Value::integer(n - idx));
  put("revindex0", Value::integer(n - idx - 1));
  put("first", Value::boolean(i == 0));
  put("last", Value::boolean(idx == n - 1));
  put("length", Value::integer(n));
  put("depth", Value::integer(1));
  put("depth0", Value::integer(0));
  put("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
  put("nextitem", idx + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
  put("cycle", Value::function("loop.cycle", [i](const CallArgs& a) {
        if (a.pos.empty()) runtime_fail("no items for cycling given");
        return a.pos[i % a.pos.size()];
      }));
  return Value::dict(std::move(d));
}

void Evaluator::exec_for(const Node& n, std::string& out, const FramePtr& frame) {
  Value iterable = eval(*n.expr, frame);
  ValueList items = iterable.iterate();
  if (n.cond) {  // {% for x in xs if cond %}: filter first, so loop.length counts kept items
    ValueList kept;
    for (auto& item : items) {
      auto f = std::make_shared<Frame>();
      f->parent = frame;
      assign(n.target, item, *f);
      if (eval(*n.cond, f).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec(n.else_body, out, frame);
    return;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    count_step(n.line, 4);  // a fresh scope and loop object: a few steps' work, even for an empty body
    auto f = std::make_shared<Frame>();
    f->parent = frame;
    assign(n.target, items[i], *f);
    f->set("loop", make_loop(items, i));
    if (exec(n.body, out, f) == Flow::Break) break;
  }
}

void Evaluator::assign(const Target& t, const Value& v, Frame& frame) {
  if (!t.ns_attr.empty()) {
    const Value* ns = frame.find(t.names[0]);
    if (!ns || !ns->is_namespace())
      runtime_fail("cannot assign attribute '" + t.ns_attr + "' on '" + t.names[0] + "': not a namespace object");
    ns->mutable_dict().set(Value::string(t.ns_attr), v);
    return;
  }
  if (!t.is_tuple) {
    frame.set(t.names[0], v);
    return;
  }
  ValueList items = v.iterate();
  if (items.size() != t.names.size())
    runtime_fail(items.size() < t.names.size()
                     ? "not enough values to unpack (expected " + std::to_string(t.names.size()) + ", got " + std::to_string(items.size()) + ")"
                     : "too many values to unpack (expected " + std::to_string(t.names.size()) + ")");
  for (size_t i = 0; i < items.size(); ++i) frame.set(t.names[i], items[i]);
}

Value Evaluator::make_macro(const Node& node, const FramePtr& frame) {
  std::weak_ptr<Frame> closure = frame;
  const Node* def = &node;
  return Value::function(node.name, [this, def, closure](const CallArgs& a) {
    if (a.pos.size() > def->params.size())
      runtime_fail("macro '" + def->name + "' takes not more than " + std::to_string(def->params.size()) +
                   " argument(s)");
    if (call_depth_ >= 100) runtime_fail("macro recursion too deep in '" + def->name + "'");
    auto f = std::make_shared<Frame>();
    FramePtr parent = closure.lock();
    f->parent = parent ? parent : root_;
    for (const auto& [k, v] : a.kw)
      if (std::find(def->params.begin(), def->params.end(), k) == def->params.end())
        runtime_fail("macro '" + def->name + "' takes no keyword argument '" + k + "'");
    for (size_t i = 0; i < def->params.size(); ++i) {
      const std::string& p = def->params[i];
      auto kw = std::find_if(a.kw.begin(), a.kw.end(), [&](const auto& kv) { return kv.first == p; });
      if (i < a.pos.size()) {
        if (kw != a.kw.end()) runtime_fail("macro '" + def->name + "' got multiple values for argument '" + p + "'");
        f->set(p, a.pos[i]);
      } else if (kw != a.kw.end()) {
        f->set(p, kw->second);
      } else if (def->defaults[i]) {
        f->set(p, eval(*def->defaults[i], f));
      } else {
        f->set(p, Value::undefined("parameter '" + p + "' was not provided"));
      }
    }
    std::string out;
    ++call_depth_;
    struct Depth {
      int& d;
      ~Depth() { --d; }
    } guard{call_depth_};
    exec(def->body, out, f);
    return Value::string(std::move(out));
  });
}

CallArgs Evaluator::eval_args(const Expr& e, size_t first, const FramePtr& frame) {
  CallArgs a;
  for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i], frame));
  for (const auto& [k, v] : e.kwargs) a.kw.emplace_back(k, eval(*v, frame));
  return a;
}

Value Evaluator::apply_filter_chain(const Expr& filter, Value subject, const FramePtr& frame) {
  Value inner;
  if (!filter.args[0]) inner = std::move(subject);  // {% filter %} / {% set x | f %}: the body text
  else if (filter.args[0]->kind == Expr::Kind::Filter) inner = apply_filter_chain(*filter.args[0], std::move(subject), frame);
  else inner = eval(*filter.args[0], frame);
  try {
    return apply_filter(filter.name, inner, eval_args(filter, 1, frame));
  } catch (const RuntimeError& e) {
    fail("chat template line ", filter.line, ": ", e.what());
  }
}

Value Evaluator::eval(const Expr& e, const FramePtr& frame) {
  count_step(e.line);
  try {
    Value v = eval_inner(e, frame);
    check_size(v, e.line);
    return v;
  } catch (const RuntimeError& err) {
    fail("chat template line ", e.line, ": ", err.what());
  }
}

Value Evaluator::eval_inner(const Expr& e, const FramePtr& frame) {
  using K = Expr::Kind;
  switch (e.kind) {
    case K::Literal: return e.value;
    case K::Name: {
      const Value* v = frame->find(e.name);
      return v ? *v : Value::undefined("'" + e.name + "' is undefined");
    }
    case K::List:
    case K::Tuple: {
      ValueList items;
      for (const auto& a : e.args) items.push_back(eval(*a, frame));
      return e.kind == K::List ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case K::Dict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) d.set(eval(*e.args[i], frame), eval(*e.args[i + 1], frame));
      return Value::dict(std::move(d));
    }
    case K::Attr: return get_attr(eval(*e.args[0], frame), e.name);
    case K::Item: return get_item(eval(*e.args[0], frame), eval(*e.args[1], frame));
    case K::Slice: {
      Value obj = eval(*e.args[0], frame);
      Value parts[3];
      for (int i = 0; i < 3; ++i)
        if (e.args[1 + i]) parts[i] = eval(*e.args[1 + i], frame);
      return get_slice(obj, parts[0], parts[1], parts[2]);
    }
    case K::Call: {
      Value callee = eval(*e.args[0], frame);
      CallArgs args = eval_args(e, 1, frame);
      if (callee.is_undefined()) {
        require_defined(callee);
      }
      if (!callee.is_function()) runtime_fail("'" + callee.type_name() + "' object is not callable");
      return callee.as_function().call(args);
    }
    case K::Filter: return apply_filter_chain(e, Value(), frame);
    case K::Test: {
      Value subject = eval(*e.args[0], frame);
      bool r = apply_test(e.name, subject, eval_args(e, 1, frame));
      return Value::boolean(r != e.negated);
    }
    case K::Unary: return unary_op(e.name, eval(*e.args[0], frame));
    case K::Binary: {
      Value a = eval(*e.args[0], frame);
      if (e.name == "and") return a.truthy() ? eval(*e.args[1], frame) : a;
      if (e.name == "or") return a.truthy() ? a : eval(*e.args[1], frame);
      return binary_op(e.name, a, eval(*e.args[1], frame));
    }
    case K::Compare: {
      Value left = eval(*e.args[0], frame);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.args[i + 1], frame);
        if (!compare_op(e.ops[i], left, right)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case K::Cond:
      if (eval(*e.args[0], frame).truthy()) return eval(*e.args[1], frame);
      if (e.args[2]) return eval(*e.args[2], frame);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
  }
  return Value();
}

}  // namespace graft::text::jinja

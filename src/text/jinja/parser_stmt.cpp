// Statement parsing: the template body, {% tags %} and their end tags.
#include "text/jinja/builtins.h"
#include "text/jinja/parser.h"

#include <algorithm>

namespace graft::text::jinja {

Body Parser::parse_template() { return subparse({}); }

Body Parser::subparse(const std::vector<std::string>& end_tags) {
  Body body;
  while (cur().type != Tok::Eof) {
    const Token& t = cur();
    if (t.type == Tok::Data) {
      auto n = std::make_unique<Node>(Node::Kind::Text, t.line);
      n->text = t.text;
      next();
      body.push_back(std::move(n));
    } else if (t.type == Tok::VarBegin) {
      next();
      auto n = std::make_unique<Node>(Node::Kind::Output, t.line);
      n->expr = parse_tuple();
      expect(Tok::VarEnd);
      body.push_back(std::move(n));
    } else if (t.type == Tok::BlockBegin) {
      next();
      if (!end_tags.empty() && is_name_in(end_tags)) return body;
      body.push_back(parse_statement());
      expect(Tok::BlockEnd);
    } else {
      error(t, "unexpected " + describe(t));
    }
  }
  if (!end_tags.empty()) {
    std::string want;
    for (size_t i = 0; i < end_tags.size(); ++i) want += (i ? " or '" : "'") + end_tags[i] + "'";
    std::string open = open_tags_.empty() ? "" : " to close '" + open_tags_.back() + "'";
    error(cur(), "unexpected end of template: expected " + want + open);
  }
  return body;
}

Body Parser::parse_statements(const std::vector<std::string>& end_tags, bool drop_needle) {
  skip_op(":");
  expect(Tok::BlockEnd);
  Body body = subparse(end_tags);
  if (drop_needle) next();
  return body;
}

NodePtr Parser::parse_statement() {
  const Token& t = cur();
  if (t.type != Tok::Name) error(t, "tag name expected, got " + describe(t));
  const std::string& tag = t.text;
  if (open_tags_.size() >= 200) error(t, "blocks nested too deeply");
  open_tags_.push_back(tag);
  NodePtr node;
  if (tag == "for") {
    node = parse_for();
  } else if (tag == "if") {
    node = parse_if();
  } else if (tag == "set") {
    node = parse_set();
  } else if (tag == "macro") {
    node = parse_macro();
  } else if (tag == "with") {
    node = parse_with();
  } else if (tag == "filter") {
    node = parse_filter_block();
  } else if (tag == "print") {
    next();  // {% print a, b %} writes each expression, not a tuple
    node = std::make_unique<Node>(Node::Kind::Output, t.line);
    node->name = "print";
    auto list = std::make_unique<Expr>(Expr::Kind::List, t.line);
    while (cur().type != Tok::BlockEnd) {
      if (!list->args.empty()) expect_op(",");
      list->args.push_back(parse_expression());
    }
    node->expr = std::move(list);
  } else if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) error(t, "'" + tag + "' outside of a for loop");
    next();
    node = std::make_unique<Node>(tag == "break" ? Node::Kind::Break : Node::Kind::Continue, t.line);
  } else if (tag == "generation") {
    next();
    node = std::make_unique<Node>(Node::Kind::Generation, t.line);
    node->body = parse_statements({"endgeneration"}, true);
  } else if (tag == "block" || tag == "extends" || tag == "include" || tag == "import" ||
             tag == "from" || tag == "call" || tag == "autoescape" || tag == "trans") {
    error(t, "tag '" + tag + "' is not supported by graft's chat templates");
  } else {
    std::string hint;
    if (open_tags_.size() > 1) hint = " (inside '" + open_tags_[open_tags_.size() - 2] + "')";
    error(t, "unknown or unexpected tag '" + tag + "'" + hint);
  }
  open_tags_.pop_back();
  return node;
}

Target Parser::parse_assign_target(bool with_namespace, const std::vector<std::string>& extra_end) {
  Target target;
  if (with_namespace && cur().type == Tok::Name && look().type == Tok::Op && look().text == ".") {
    target.names.push_back(next().text);
    next();
    target.ns_attr = expect_name().text;
    return target;
  }
  ExprPtr e = parse_tuple(true, true, extra_end);
  auto add_name = [&](const Expr& n) {
    if (n.kind != Expr::Kind::Name) error(cur(), "can't assign to this expression (only names and tuples of names)");
    if (n.name == "true" || n.name == "false" || n.name == "none" || n.name == "loop")
      error(cur(), "can't assign to '" + n.name + "'");
    target.names.push_back(n.name);
  };
  if (e->kind == Expr::Kind::Tuple) {
    target.is_tuple = true;
    for (const auto& item : e->args) add_name(*item);
  } else {
    add_name(*e);
  }
  return target;
}

NodePtr Parser::parse_for() {
  auto node = std::make_unique<Node>(Node::Kind::For, next().line);
  node->target = parse_assign_target(false, {"in"});
  if (!skip_name("in")) unexpected("'in'");
  node->expr = parse_tuple(false, false, {"recursive"});
  if (skip_name("if")) node->cond = parse_expression();
  if (is_name("recursive")) error(cur(), "recursive for loops are not supported by graft's chat templates");
  ++loop_depth_;
  node->body = parse_statements({"endfor", "else"}, false);
  --loop_depth_;
  if (next().text == "else") node->else_body = parse_statements({"endfor"}, true);
  return node;
}

NodePtr Parser::parse_if() {
  auto node = std::make_unique<Node>(Node::Kind::If, next().line);
  while (true) {
    node->conds.push_back(parse_tuple(false, false));
    node->bodies.push_back(parse_statements({"elif", "else", "endif"}, false));
    const Token& t = next();
    if (t.text == "elif") continue;
    if (t.text == "else") node->bodies.push_back(parse_statements({"endif"}, true));
    break;
  }
  return node;
}

NodePtr Parser::parse_set() {
  int line = next().line;
  Target target = parse_assign_target(true, {});
  if (skip_op("=")) {
    auto node = std::make_unique<Node>(Node::Kind::Set, line);
    node->target = std::move(target);
    node->expr = parse_tuple();
    return node;
  }
  auto node = std::make_unique<Node>(Node::Kind::SetBlock, line);
  node->target = std::move(target);
  if (is_op("|")) {
    next();
    node->expr = parse_filter(nullptr, true);
  }
  node->body = parse_statements({"endset"}, true);
  return node;
}

namespace {

// The first use of a name in a subtree, or nullptr.
const Expr* find_name(const Expr* e, const std::string& name) {
  if (!e) return nullptr;
  if (e->kind == Expr::Kind::Name && e->name == name) return e;
  for (const auto& a : e->args)
    if (const Expr* hit = find_name(a.get(), name)) return hit;
  for (const auto& kv : e->kwargs)
    if (const Expr* hit = find_name(kv.second.get(), name)) return hit;
  return nullptr;
}

const Expr* find_name(const Body& body, const std::string& name) {
  for (const auto& n : body) {
    for (const Expr* e : {n->expr.get(), n->cond.get()})
      if (const Expr* hit = find_name(e, name)) return hit;
    for (const auto& c : n->conds)
      if (const Expr* hit = find_name(c.get(), name)) return hit;
    for (const auto& d : n->defaults)
      if (const Expr* hit = find_name(d.get(), name)) return hit;
    for (const auto& a : n->assigns)
      if (const Expr* hit = find_name(a.second.get(), name)) return hit;
    for (const Body* b : {&n->body, &n->else_body})
      if (const Expr* hit = find_name(*b, name)) return hit;
    for (const auto& b : n->bodies)
      if (const Expr* hit = find_name(b, name)) return hit;
  }
  return nullptr;
}

}  // namespace

NodePtr Parser::parse_macro() {
  auto node = std::make_unique<Node>(Node::Kind::Macro, next().line);
  node->name = expect_name().text;
  expect_op("(");
  while (!is_op(")")) {
    if (!node->params.empty()) expect_op(",");
    node->params.push_back(expect_name().text);
    if (skip_op("=")) {
      node->defaults.push_back(parse_expression());
    } else {
      for (const auto& d : node->defaults)
        if (d) error(cur(), "non-default argument follows default argument");
      node->defaults.push_back(nullptr);
    }
  }
  expect_op(")");
  int saved_depth = loop_depth_;
  loop_depth_ = 0;
  node->body = parse_statements({"endmacro"}, true);
  loop_depth_ = saved_depth;
  // jinja2 gives macros that mention these special variables extra behaviour graft lacks.
  for (const char* special : {"varargs", "kwargs", "caller"}) {
    bool is_param = std::find(node->params.begin(), node->params.end(), special) != node->params.end();
    if (const Expr* hit = is_param ? nullptr : find_name(node->body, special))
      syntax_fail(hit->line, 1, "macro '" + node->name + "' uses '" + special +
                                    "', which graft's chat templates do not support");
  }
  return node;
}

NodePtr Parser::parse_with() {
  auto node = std::make_unique<Node>(Node::Kind::With, next().line);
  while (cur().type != Tok::BlockEnd) {
    if (!node->assigns.empty()) expect_op(",");
    Target t = parse_assign_target(false, {});
    expect_op("=");
    node->assigns.emplace_back(std::move(t), parse_expression());
  }
  node->body = parse_statements({"endwith"}, true);
  return node;
}

NodePtr Parser::parse_filter_block() {
  auto node = std::make_unique<Node>(Node::Kind::FilterBlock, next().line);
  node->expr = parse_filter(nullptr, true);
  node->body = parse_statements({"endfilter"}, true);
  return node;
}

}  // namespace graft::text::jinja

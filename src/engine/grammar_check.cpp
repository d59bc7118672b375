// What parse_grammar checks after the syntax: the root exists, every used rule is defined, and no
// rule is left-recursive in a way that would grow the pushdown stack without consuming input. Also
// the byte classes the matcher's transition tables are indexed by.
#include <algorithm>
#include <map>

#include "engine/grammar_program.h"
#include "graft/core/error.h"

namespace graft::engine {

bool CharClass::contains(uint32_t cp) const {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                             [](uint32_t c, const std::pair<uint32_t, uint32_t>& r) { return c < r.first; });
  return it != ranges.begin() && cp <= std::prev(it)->second;
}

bool CharClass::intersects(uint32_t lo, uint32_t hi) const {
  // The first range ending at or after lo decides.
  auto it = std::lower_bound(ranges.begin(), ranges.end(), lo,
                             [](const std::pair<uint32_t, uint32_t>& r, uint32_t c) { return r.second < c; });
  return it != ranges.end() && it->first <= hi;
}

std::string Grammar::where(uint32_t offset) const {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    char c = text[i];
    if (c == '\n' || (c == '\r' && (i + 1 >= text.size() || text[i + 1] != '\n'))) {
      ++line;
      col = 1;
    } else if ((static_cast<unsigned char>(c) & 0xC0) != 0x80 && c != '\r') {
      ++col;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

std::string Grammar::describe_position(uint32_t element) const {
  // The rule is the one whose alternatives hold this element: the last alternative start <= it.
  std::string rule = "?";
  uint32_t best = 0;
  for (const GrammarRule& r : rules)
    for (uint32_t a : r.alts)
      if (a <= element && a >= best) {
        best = a;
        rule = r.name;
      }
  return "rule '" + rule + "', " + where(elements[element].source);
}

namespace {

struct Edge {
  uint32_t to;
  bool tail;         // the reference ends its alternative: entering it pushes nothing
  uint32_t element;  // the reference, for the message
};

std::vector<bool> nullable_rules(const Grammar& g) {
  std::vector<bool> nullable(g.rules.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < g.rules.size(); ++r) {
      if (nullable[r]) continue;
      for (uint32_t a : g.rules[r].alts) {
        uint32_t i = a;
        while (g.elements[i].kind == GrammarElement::Kind::kRule && nullable[g.elements[i].arg]) ++i;
        if (g.elements[i].kind == GrammarElement::Kind::kEnd) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  return nullable;
}

// Rule u reaches rule v before consuming input: v is referenced after only nullable references.
std::vector<std::vector<Edge>> left_edges(const Grammar& g, const std::vector<bool>& nullable) {
  std::vector<std::vector<Edge>> edges(g.rules.size());
  for (size_t r = 0; r < g.rules.size(); ++r) {
    for (uint32_t a : g.rules[r].alts) {
      for (uint32_t i = a; g.elements[i].kind == GrammarElement::Kind::kRule; ++i) {
        uint32_t v = g.elements[i].arg;
        edges[r].push_back({v, g.elements[i + 1].kind == GrammarElement::Kind::kEnd, i});
        if (!nullable[v]) break;
      }
    }
  }
  return edges;
}

// Strongly connected components (Tarjan's, iterative: rule chains can be long).
std::vector<uint32_t> components(const std::vector<std::vector<Edge>>& edges) {
  const uint32_t n = static_cast<uint32_t>(edges.size()), kNone = UINT32_MAX;
  std::vector<uint32_t> index(n, kNone), low(n, 0), comp(n, kNone), stack;
  std::vector<bool> on(n, false);
  std::vector<std::pair<uint32_t, size_t>> call;  // (node, next edge)
  uint32_t counter = 0, comps = 0;
  for (uint32_t s = 0; s < n; ++s) {
    if (index[s] != kNone) continue;
    call.push_back({s, 0});
    index[s] = low[s] = counter++;
    stack.push_back(s);
    on[s] = true;
    while (!call.empty()) {
      auto& [u, e] = call.back();
      if (e < edges[u].size()) {
        uint32_t v = edges[u][e++].to;
        if (index[v] == kNone) {
          index[v] = low[v] = counter++;
          stack.push_back(v);
          on[v] = true;
          call.push_back({v, 0});
        } else if (on[v]) {
          low[u] = std::min(low[u], index[v]);
        }
        continue;
      }
      uint32_t done = u;
      call.pop_back();
      if (!call.empty()) low[call.back().first] = std::min(low[call.back().first], low[done]);
      if (low[done] == index[done]) {
        uint32_t w;
        do {
          w = stack.back();
          stack.pop_back();
          on[w] = false;
          comp[w] = comps;
        } while (w != done);
        ++comps;
      }
    }
  }
  return comp;
}

// "a -> b -> a": the names along the cycle u -> v ~> u, generated rules shown as their owner.
std::string cycle_text(const Grammar& g, const std::vector<std::vector<Edge>>& edges, const std::vector<uint32_t>& comp,
                       uint32_t u, uint32_t v) {
  std::vector<uint32_t> from(g.rules.size(), UINT32_MAX), queue{v};
  from[v] = v;
  for (size_t q = 0; q < queue.size() && from[u] == UINT32_MAX; ++q)
    for (const Edge& e : edges[queue[q]])
      if (comp[e.to] == comp[u] && from[e.to] == UINT32_MAX) {
        from[e.to] = queue[q];
        queue.push_back(e.to);
      }
  std::vector<uint32_t> path{u};
  for (uint32_t w = u; w != v;) path.push_back(w = from[w]);
  path.push_back(u);
  std::reverse(path.begin() + 1, path.end() - 1);
  std::string out;
  std::string last;
  for (uint32_t r : path) {
    if (!out.empty() && g.rules[r].name == last) continue;
    if (!out.empty()) out += " -> ";
    out += last = g.rules[r].name;
  }
  if (out.find(" -> ") == std::string::npos) out += " -> " + last;
  return out;
}

void check_left_recursion(const Grammar& g) {
  const std::vector<bool> nullable = nullable_rules(g);
  const auto edges = left_edges(g, nullable);
  const auto comp = components(edges);
  // A cycle of tail references only re-enters rules without pushing anything: the matcher's
  // duplicate-stack check ends it. A cycle with a pushing reference grows the stack forever.
  for (uint32_t u = 0; u < edges.size(); ++u)
    for (const Edge& e : edges[u])
      if (!e.tail && comp[e.to] == comp[u])
        fail_as(ErrorKind::kBadRequest, "grammar: rule '", g.rules[u].name, "' is left-recursive (",
                cycle_text(g, edges, comp, u, e.to), ", ", g.where(g.elements[e.element].source), ")");
}

void fill_byte_classes(Grammar& g) {
  std::map<std::vector<bool>, uint8_t> seen;
  uint32_t next = 0;
  for (int b = 0; b < 0x80; ++b) {
    std::vector<bool> sig(g.classes.size());
    for (size_t c = 0; c < g.classes.size(); ++c) sig[c] = g.classes[c].contains(static_cast<uint32_t>(b));
    auto [it, fresh] = seen.emplace(std::move(sig), static_cast<uint8_t>(next));
    if (fresh) ++next;
    g.byte_class[b] = it->second;
  }
  const uint8_t invalid = static_cast<uint8_t>(next++);
  for (int b = 0x80; b < 0x100; ++b) {
    bool never = b == 0xC0 || b == 0xC1 || b >= 0xF5;
    g.byte_class[b] = never ? invalid : static_cast<uint8_t>(next++);
  }
  g.byte_class_count = next;
}

void fill_element_chains(Grammar& g) {
  for (const GrammarRule& r : g.rules) {
    if (r.chain == 0) continue;
    if (g.element_chain.empty()) g.element_chain.resize(g.elements.size());
    for (uint32_t e = r.alts[0];; ++e) {
      g.element_chain[e] = {r.chain, r.chain_k, e - r.alts[0]};
      if (g.elements[e].kind == GrammarElement::Kind::kEnd) break;
    }
  }
}

}  // namespace

void check_grammar(Grammar& g, std::string_view root,
                   const std::vector<std::pair<std::string, uint32_t>>& undefined) {
  bool found = false;
  for (uint32_t r = 0; r < g.rules.size(); ++r)
    if (!g.rules[r].generated && g.rules[r].name == root && !g.rules[r].alts.empty()) {
      g.root = r;
      found = true;
    }
  if (!found) fail_as(ErrorKind::kBadRequest, "grammar: no rule '", root, "'");
  if (undefined.size() == 1)
    fail_as(ErrorKind::kBadRequest, "grammar: rule '", undefined[0].first, "' is used but not defined (",
            g.where(undefined[0].second), ")");
  if (!undefined.empty()) {
    std::string list;
    for (const auto& [name, at] : undefined)
      list += (list.empty() ? "'" : ", '") + name + "' (" + g.where(at) + ")";
    fail_as(ErrorKind::kBadRequest, "grammar: rules ", list, " are used but not defined");
  }
  check_left_recursion(g);
  fill_byte_classes(g);
  fill_element_chains(g);
}

std::shared_ptr<const Grammar> parse_grammar(std::string_view text, std::string_view root) {
  if (text.size() > kGrammarMaxBytes)
    fail_as(ErrorKind::kLimit, "grammar: ", text.size(), " bytes exceeds the limit of ", kGrammarMaxBytes);
  std::vector<std::pair<std::string, uint32_t>> undefined;
  Grammar g = parse_gbnf(text, undefined);
  if (g.rules.empty()) fail_as(ErrorKind::kBadRequest, "grammar: empty (no rules)");
  check_grammar(g, root, undefined);
  return std::make_shared<const Grammar>(std::move(g));
}

}  // namespace graft::engine

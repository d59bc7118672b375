// Tool calls, output side: the generated text parsed back into calls, whole or as it streams
// (server/tool_calls.h). Parsing is a pure function of the text so far; a stream sends the
// difference between consecutive parses, which only grows: content is held back while it may yet
// belong to a call, and a call's arguments are always a prefix of the raw text of its arguments value.
#include <cctype>
#include <optional>
#include <random>

#include "server/tool_calls.h"

namespace graft::server {

using json = nlohmann::ordered_json;

namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>", kPythonTag = "<|python_tag|>";
constexpr size_t npos = std::string_view::npos;

bool is_blank(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
size_t skip_blanks(std::string_view s, size_t p) {
  while (p < s.size() && is_blank(s[p])) ++p;
  return p;
}
std::string_view rtrim(std::string_view s) {
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}
std::string_view ltrim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  return s;
}
// s (non-empty) is a proper prefix of `of`.
bool proper_prefix(std::string_view s, std::string_view of) {
  return !s.empty() && s.size() < of.size() && of.substr(0, s.size()) == s;
}

// The end of the JSON value starting at p (structure only: strings, nesting, scalars), or npos when
// the text ends first. A scalar at the very end counts as complete only when `final`.
size_t value_end(std::string_view s, size_t p, bool final) {
  if (p >= s.size()) return npos;
  if (s[p] == '"') {
    for (size_t i = p + 1; i < s.size(); ++i) {
      if (s[i] == '\\') ++i;
      else if (s[i] == '"') return i + 1;
    }
    return npos;
  }
  if (s[p] == '{' || s[p] == '[') {
    int depth = 0;
    for (size_t i = p; i < s.size(); ++i) {
      const char c = s[i];
      if (c == '"') {
        const size_t e = value_end(s, i, final);
        if (e == npos) return npos;
        i = e - 1;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (--depth == 0) return i + 1;
      }
    }
    return npos;
  }
  size_t i = p;
  while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '.' || s[i] == '-' || s[i] == '+'))
    ++i;
  if (i == s.size() && !final) return npos;
  return i == p ? p + 1 : i;  // a stray character: a one-character "value" the JSON parser rejects
}

// The head of a call object, `{"name": "f", "arguments": ` (also "parameters", and an optional
// leading `"type": "function", `), matched against the text at p.
struct Head {
  enum Status { Match, Prefix, Mismatch } status = Mismatch;
  std::string name;
  size_t args = 0;  // where the arguments value starts
};

class HeadMatcher {
 public:
  HeadMatcher(std::string_view s) : s_(s) {}
  Head match(size_t p) {
    Head best;
    for (bool typed : {false, true}) {
      Head h = attempt(p, typed);
      if (h.status == Head::Match) return h;
      if (h.status == Head::Prefix) best = h;
    }
    return best;
  }

 private:
  // Each step: true to go on; status_ set on a prefix or a mismatch.
  bool lit(size_t& p, std::string_view w) {
    p = skip_blanks(s_, p);
    const std::string_view rest = s_.substr(std::min(p, s_.size()));
    if (rest.size() < w.size()) {
      status_ = w.substr(0, rest.size()) == rest ? Head::Prefix : Head::Mismatch;
      return false;
    }
    if (rest.substr(0, w.size()) != w) {
      status_ = Head::Mismatch;
      return false;
    }
    p += w.size();
    return true;
  }
  bool string(size_t& p, std::string& out) {
    p = skip_blanks(s_, p);
    if (p >= s_.size()) return status_ = Head::Prefix, false;
    if (s_[p] != '"') return status_ = Head::Mismatch, false;
    const size_t e = value_end(s_, p, true);
    if (e == npos) return status_ = Head::Prefix, false;
    try {
      out = json::parse(s_.substr(p, e - p)).get<std::string>();
    } catch (const json::exception&) {
      return status_ = Head::Mismatch, false;
    }
    p = e;
    return true;
  }
  bool either(size_t& p, std::string_view a, std::string_view b) {
    size_t q = p;
    if (lit(q, a)) return p = q, true;
    const Head::Status first = status_;
    q = p;
    if (lit(q, b)) return p = q, true;
    if (first == Head::Prefix) status_ = Head::Prefix;
    return false;
  }
  Head attempt(size_t p, bool typed) {
    Head h;
    status_ = Head::Mismatch;
    std::string ignored;
    if (!lit(p, "{")) return h.status = status_, h;
    if (typed && !(lit(p, "\"type\"") && lit(p, ":") && lit(p, "\"function\"") && lit(p, ",")))
      return h.status = status_, h;
    if (!(lit(p, "\"name\"") && lit(p, ":") && string(p, h.name) && lit(p, ",") &&
          either(p, "\"arguments\"", "\"parameters\"") && lit(p, ":")))
      return h.status = status_, h;
    p = skip_blanks(s_, p);
    if (p >= s_.size()) return h.status = Head::Prefix, h;
    if (s_[p] != '{') return h.status = Head::Mismatch, h;  // arguments are an object, or this is no call
    h.status = Head::Match;
    h.args = p;
    return h;
  }
  std::string_view s_;
  Head::Status status_ = Head::Mismatch;
};

// A complete call object at [p, e): its name and the raw text of its arguments (a re-serialisation
// when the keys come in another order). nullopt when it is not a call.
std::optional<ParsedCall> complete_call(std::string_view s, size_t p, size_t e) {
  json obj;
  try {
    obj = json::parse(s.substr(p, e - p));
  } catch (const json::exception&) {
    return std::nullopt;
  }
  if (!obj.is_object() || !obj.contains("name") || !obj["name"].is_string()) return std::nullopt;
  const char* key = obj.contains("arguments") ? "arguments" : obj.contains("parameters") ? "parameters" : nullptr;
  if (!key || !obj[key].is_object()) return std::nullopt;
  ParsedCall c;
  c.name = obj["name"].get<std::string>();
  const Head h = HeadMatcher(s.substr(0, e)).match(p);
  const size_t ae = h.status == Head::Match ? value_end(s.substr(0, e), h.args, true) : npos;
  if (ae != npos && h.name == c.name) c.arguments = std::string(s.substr(h.args, ae - h.args));
  else c.arguments = obj[key].dump();
  return c;
}

// The call whose head matched while the text ends inside it: its arguments so far (exact once the
// value is complete; without trailing blanks before, as the complete value never ends in one).
ParsedCall partial_call(std::string_view s, const Head& h) {
  const size_t e = value_end(s, h.args, false);
  const std::string_view args = e == npos ? rtrim(s.substr(h.args)) : s.substr(h.args, e - h.args);
  return {h.name, std::string(args), false};
}

// Content pieces around calls: each trimmed on its sides that face a call, the non-empty joined.
struct ContentBuilder {
  std::vector<std::string> pieces;
  void add(std::string_view piece, bool after_call, bool before_call) {
    if (after_call) piece = ltrim(piece);
    if (before_call) piece = rtrim(piece);
    if (!piece.empty()) pieces.emplace_back(piece);
  }
  std::string joined() const {
    std::string out;
    for (size_t i = 0; i < pieces.size(); ++i) out += (i ? "\n" : "") + pieces[i];
    return out;
  }
};

ParsedOutput parse_hermes(std::string_view s, bool final, size_t max_calls, bool cut) {
  ParsedOutput out;
  ContentBuilder content;
  std::string pending;  // malformed call text carried into the next content piece
  size_t pos = 0;
  bool after_call = false;
  auto piece = [&](std::string_view text, bool before_call) {
    content.add(pending + std::string(text), after_call, before_call);
    pending.clear();
  };
  while (pos <= s.size()) {
    const size_t i = out.calls.size() < max_calls ? s.find(kOpen, pos) : npos;
    if (i == npos) {
      std::string_view tail = s.substr(pos);
      if (final && cut) {  // "<tool_ca" at a cut: a call that never came
        const std::string_view t = rtrim(tail);
        for (size_t n = std::min(t.size(), kOpen.size() - 1); n > 1; --n)
          if (proper_prefix(t.substr(t.size() - n), kOpen)) {
            tail = t.substr(0, t.size() - n);
            out.unfinished = true;
            break;
          }
      }
      if (!final) {
        // Hold back what may yet start a call, and trailing blanks (they may come before one).
        for (size_t n = std::min(tail.size(), kOpen.size() - 1); n > 0; --n)
          if (proper_prefix(tail.substr(tail.size() - n), kOpen)) {
            tail.remove_suffix(n);
            break;
          }
        tail = rtrim(tail);
      }
      piece(tail, false);
      break;
    }
    const size_t k = skip_blanks(s, i + kOpen.size());
    const size_t e = k < s.size() && s[k] == '{' ? value_end(s, k, final) : (k < s.size() ? k : npos);
    auto malformed = [&] {  // this <tool_call> is text; look for the next one after it
      pending += std::string(s.substr(pos, i + kOpen.size() - pos));
      pos = i + kOpen.size();
    };
    if (e == npos) {  // the text ends inside the call
      const Head h = HeadMatcher(s).match(k);
      if (final && h.status == Head::Mismatch) {  // not a call after all: text
        pending += std::string(s.substr(pos));
        piece("", false);
        break;
      }
      piece(s.substr(pos, i - pos), true);
      if (final) out.unfinished = true;  // cut off (max_tokens): neither a call nor text
      else if (h.status == Head::Match) out.calls.push_back(partial_call(s, h));
      break;
    }
    std::optional<ParsedCall> call = s[k] == '{' ? complete_call(s, k, e) : std::nullopt;
    if (!call) {
      malformed();
      continue;
    }
    const size_t m = skip_blanks(s, e);
    const std::string_view rest = s.substr(m);
    size_t next;
    if (rest.substr(0, kClose.size()) == kClose) next = m + kClose.size();
    else if (rest.empty() || proper_prefix(rest, kClose)) next = s.size();  // unclosed at the end
    else {
      malformed();
      continue;
    }
    piece(s.substr(pos, i - pos), true);
    out.calls.push_back(std::move(*call));
    after_call = true;
    pos = next;
    if (pos == s.size()) break;
  }
  out.content = content.joined();
  return out;
}

ParsedOutput parse_llama3(std::string_view s, bool final, size_t max_calls) {
  ParsedOutput all_content;
  all_content.content = final ? std::string(s) : std::string(rtrim(s));
  size_t p = skip_blanks(s, 0);
  if (s.substr(p, kPythonTag.size()) == kPythonTag) p = skip_blanks(s, p + kPythonTag.size());
  else if (!final && proper_prefix(s.substr(p), kPythonTag)) return {};
  if (p == s.size()) return final ? all_content : ParsedOutput{};
  if (s[p] != '{') return all_content;
  ParsedOutput out;
  while (p < s.size() && s[p] == '{' && out.calls.size() < max_calls) {
    const size_t e = value_end(s, p, final);
    if (e == npos) {
      if (final) {
        if (HeadMatcher(s).match(p).status == Head::Mismatch) break;  // not a call: text
        out.unfinished = true;  // a call cut off (max_tokens): neither a call nor text
        return out.calls.empty() ? ParsedOutput{{}, {}, true} : out;
      }
      const Head h = HeadMatcher(s).match(p);
      if (h.status == Head::Match) out.calls.push_back(partial_call(s, h));
      else if (h.status == Head::Mismatch && out.calls.empty()) return {};  // decided when it closes
      return out;
    }
    std::optional<ParsedCall> call = complete_call(s, p, e);
    if (!call) break;
    out.calls.push_back(std::move(*call));
    p = skip_blanks(s, e);
    if (p < s.size() && s[p] == ';') p = skip_blanks(s, p + 1);
  }
  if (out.calls.empty()) return all_content;
  std::string_view rest = ltrim(s.substr(std::min(p, s.size())));
  out.content = std::string(final ? rest : rtrim(rest));
  return out;
}

}  // namespace

ParsedOutput parse_tool_output(ToolStyle style, std::string_view text, bool final, size_t max_calls, bool cut) {
  if (style == ToolStyle::Llama3Json) return parse_llama3(text, final, max_calls);
  return parse_hermes(text, final, max_calls, cut);
}

std::string new_tool_call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string s = "call_";
  for (int i = 0; i < 24; ++i) s += chars[rng() % 62];
  return s;
}

json tool_message(const ParsedOutput& out, const std::vector<std::string>& ids) {
  json m{{"role", "assistant"}};
  m["content"] = out.calls.empty() || !out.content.empty() ? json(out.content) : json(nullptr);
  if (!out.calls.empty()) {
    json calls = json::array();
    for (size_t i = 0; i < out.calls.size(); ++i)
      calls.push_back(json{{"id", i < ids.size() ? ids[i] : new_tool_call_id()},
                           {"type", "function"},
                           {"function", json{{"name", out.calls[i].name}, {"arguments", out.calls[i].arguments}}}});
    m["tool_calls"] = std::move(calls);
  }
  return m;
}

std::vector<json> ToolCallStream::diff(const ParsedOutput& now) {
  std::vector<json> deltas;
  // Content: what is new beyond what was sent. The parses of a stream only grow it; should a stream
  // turn out malformed at its end, the part past the common prefix is sent (text is never dropped).
  size_t common = 0;
  while (common < content_sent_.size() && common < now.content.size() && content_sent_[common] == now.content[common])
    ++common;
  if (now.content.size() > common) {
    deltas.push_back(json{{"content", now.content.substr(common)}});
    content_sent_ = now.content;
  }
  // Calls: each once it is complete, whole (name and arguments in one delta), so a stream never holds
  // arguments that do not parse, and a call cut off by max_tokens is never sent: the same calls as
  // the whole answer's.
  for (size_t i = calls_.size(); i < now.calls.size() && now.calls[i].complete; ++i) {
    const ParsedCall& c = now.calls[i];
    calls_.push_back({new_tool_call_id(), c.arguments});
    deltas.push_back(json{{"tool_calls", json::array({json{{"index", i},
                                                           {"id", calls_[i].id},
                                                           {"type", "function"},
                                                           {"function", json{{"name", c.name}, {"arguments", c.arguments}}}}})}});
  }
  return deltas;
}

std::vector<json> ToolCallStream::feed(const std::string& piece) {
  text_ += piece;
  return diff(parse_tool_output(style_, text_, false, max_calls_));
}

std::vector<json> ToolCallStream::finish(bool cut) { return diff(parse_tool_output(style_, text_, true, max_calls_, cut)); }

}  // namespace graft::server

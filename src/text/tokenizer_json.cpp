// Loading HF tokenizer.json (model, added_tokens, normalizer, pre_tokenizer, post_processor,
// decoder) and tokenizer_config.json (bos/eos tokens, add_bos_token / add_eos_token).
// Anything outside what is supported is a graft::Error naming it and the file.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "graft/core/error.h"
#include "graft/io/json_file.h"
#include "text/tokenizer_internal.h"

namespace graft::text::detail {

namespace {

using json = nlohmann::json;
constexpr int64_t kMaxId = int64_t{1} << 24;  // far above any real vocabulary

json read_json(const std::string& path) { return io::read_json_file(path, io::kMaxTokenizerBytes, "tokenizer file"); }

struct Ctx {
  Ctx(const std::string& p, TokenizerImpl& i) : path(p), impl(i) {}
  const std::string& path;
  TokenizerImpl& impl;
  bool byte_level = false;
  bool template_seen = false;
  std::vector<int32_t> prefix, suffix;

  [[noreturn]] void bad(const std::string& field, const std::string& why) const {
    fail("tokenizer file '", path, "': ", field, ": ", why);
  }
  std::string type_of(const json& j, const std::string& field) const {
    if (!j.is_object()) bad(field, "expected an object");
    auto it = j.find("type");
    if (it == j.end() || !it->is_string()) bad(field, "missing \"type\"");
    return it->get<std::string>();
  }
  [[noreturn]] void unsupported(const std::string& what, const std::string& type) const {
    fail_as(ErrorKind::kUnsupported, "tokenizer file '", path, "': unsupported ", what, " type '", type, "'");
  }
  std::string str(const json& j, const char* key, const std::string& field,
                  const std::string& def = "", bool required = false) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
      if (required) bad(field + "." + key, "missing");
      return def;
    }
    if (!it->is_string()) bad(field + "." + key, "expected a string");
    return it->get<std::string>();
  }
  bool flag(const json& j, const char* key, const std::string& field, bool def) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return def;
    if (!it->is_boolean()) bad(field + "." + key, "expected a boolean");
    return it->get<bool>();
  }
  int64_t integer(const json& j, const std::string& field) const {
    if (!j.is_number_integer()) bad(field, "expected an integer");
    return j.get<int64_t>();
  }
  // {"String": "..."} or {"Regex": "..."} -> regex (literal for String).
  std::shared_ptr<const Regex> pattern(const json& j, const std::string& field) const {
    if (!j.is_object()) bad(field, "expected {\"String\": ...} or {\"Regex\": ...}");
    try {
      if (j.contains("String")) return std::make_shared<Regex>(j["String"].get<std::string>(), true);
      if (j.contains("Regex")) return std::make_shared<Regex>(j["Regex"].get<std::string>(), false);
    } catch (const Error& e) {
      bad(field, e.what());
    }
    bad(field, "expected {\"String\": ...} or {\"Regex\": ...}");
  }
};

void parse_model(Ctx& c, const json& m) {
  TokenizerImpl& im = c.impl;
  if (!m.is_object()) c.bad("model", "expected an object");
  std::string type = m.contains("type") ? c.type_of(m, "model") : (m.contains("merges") ? "BPE" : "");
  if (type != "BPE") c.unsupported("model", type.empty() ? "(none)" : type);
  auto dropout = m.find("dropout");
  if (dropout != m.end() && !dropout->is_null() && dropout->get<double>() != 0.0) {
    c.bad("model.dropout", "BPE dropout is not supported");
  }
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!c.str(m, k, "model").empty()) c.bad(std::string("model.") + k, "not supported");
  }
  auto vocab = m.find("vocab");
  if (vocab == m.end() || !vocab->is_object()) c.bad("model.vocab", "expected an object");
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    int64_t id = c.integer(it.value(), "model.vocab['" + it.key() + "']");
    if (id < 0 || id >= kMaxId) c.bad("model.vocab['" + it.key() + "']", "id " + std::to_string(id) + " is out of range");
    if (static_cast<size_t>(id) >= im.id_to_token.size()) {
      im.id_to_token.resize(id + 1);
      im.id_added.resize(id + 1, -1);
    }
    if (im.id_added[id] != -1) c.bad("model.vocab['" + it.key() + "']", "id " + std::to_string(id) + " is used twice");
    im.id_to_token[id] = it.key();
    im.id_added[id] = 0;
    im.model.vocab.emplace(it.key(), static_cast<int32_t>(id));
  }
  auto merges = m.find("merges");
  if (merges != m.end() && !merges->is_null()) {
    if (!merges->is_array()) c.bad("model.merges", "expected an array");
    int32_t rank = 0;
    for (const json& mg : *merges) {
      std::string field = "model.merges[" + std::to_string(rank) + "]";
      std::string a, b;
      if (mg.is_string()) {
        std::string s = mg.get<std::string>();
        size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) c.bad(field, "expected \"left right\"");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
        a = mg[0].get<std::string>();
        b = mg[1].get<std::string>();
      } else {
        c.bad(field, "expected \"left right\" or [\"left\", \"right\"]");
      }
      if (!im.model.add_merge(a, b, rank)) c.bad(field, "'" + a + "' + '" + b + "': a part or the merged token is not in model.vocab");
      ++rank;
    }
  }
  im.model.byte_fallback = c.flag(m, "byte_fallback", "model", false);
  im.model.fuse_unk = c.flag(m, "fuse_unk", "model", false);
  im.model.ignore_merges = c.flag(m, "ignore_merges", "model", false);
  std::string unk = c.str(m, "unk_token", "model");
  if (!unk.empty()) {
    auto it = im.model.vocab.find(unk);
    if (it == im.model.vocab.end()) c.bad("model.unk_token", "'" + unk + "' is not in model.vocab");
    im.model.unk_id = it->second;
    im.unk = it->second;
  }
}

void parse_added(Ctx& c, const json& arr) {
  TokenizerImpl& im = c.impl;
  if (arr.is_null()) return;
  if (!arr.is_array()) c.bad("added_tokens", "expected an array");
  for (size_t i = 0; i < arr.size(); ++i) {
    std::string field = "added_tokens[" + std::to_string(i) + "]";
    const json& a = arr[i];
    if (!a.is_object() || !a.contains("id")) c.bad(field, "expected an object with id and content");
    int64_t id = c.integer(a["id"], field + ".id");
    if (id < 0 || id >= kMaxId) c.bad(field + ".id", std::to_string(id) + " is out of range");
    AddedInfo info;
    info.id = static_cast<int32_t>(id);
    info.content = c.str(a, "content", field, "", true);
    info.special = c.flag(a, "special", field, false);
    info.lstrip = c.flag(a, "lstrip", field, false);
    info.rstrip = c.flag(a, "rstrip", field, false);
    info.single_word = c.flag(a, "single_word", field, false);
    info.normalized = c.flag(a, "normalized", field, !info.special);
    if (static_cast<size_t>(id) >= im.id_to_token.size()) {
      im.id_to_token.resize(id + 1);
      im.id_added.resize(id + 1, -1);
    }
    im.added.push_back(std::move(info));
  }
}

void parse_normalizer(Ctx& c, const json& n, const std::string& field) {
  if (n.is_null()) return;
  std::string type = c.type_of(n, field);
  NormStep st;
  if (type == "Sequence") {
    const json& list = n.contains("normalizers") ? n["normalizers"] : json();
    if (!list.is_array()) c.bad(field + ".normalizers", "expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
      parse_normalizer(c, list[i], field + ".normalizers[" + std::to_string(i) + "]");
    }
    return;
  } else if (type == "Prepend") {
    st.kind = NormStep::Prepend;
    st.text = c.str(n, "prepend", field, "", true);
  } else if (type == "Replace") {
    st.kind = NormStep::Replace;
    st.content = c.str(n, "content", field);
    if (!n.contains("pattern")) c.bad(field + ".pattern", "missing");
    const json& p = n["pattern"];
    if (p.is_object() && p.contains("String") && p["String"].is_string()) {
      st.text = p["String"].get<std::string>();
    } else {
      st.re = c.pattern(p, field + ".pattern");
    }
  } else if (type == "NFC") {
    st.kind = NormStep::NFC;
  } else {
    c.unsupported("normalizer", type);
  }
  c.impl.normalizers.push_back(std::move(st));
}

SplitBehavior parse_behavior(Ctx& c, const std::string& s, const std::string& field) {
  if (s == "Isolated") return SplitBehavior::Isolated;
  if (s == "Removed") return SplitBehavior::Removed;
  if (s == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (s == "Contiguous") return SplitBehavior::Contiguous;
  c.bad(field, "unknown split behavior '" + s + "'");
}

PreStep::Prepend parse_prepend(Ctx& c, const json& j, const std::string& field) {
  std::string s = c.str(j, "prepend_scheme", field, "always");
  PreStep::Prepend p = s == "always" ? PreStep::Always
                       : s == "first" ? PreStep::First
                       : s == "never" ? PreStep::Never
                                      : (c.bad(field + ".prepend_scheme", "unknown value '" + s + "'"), PreStep::Always);
  if (!c.flag(j, "add_prefix_space", field, true)) p = PreStep::Never;
  return p;
}

std::string parse_replacement(Ctx& c, const json& j, const std::string& field) {
  std::string r = c.str(j, "replacement", field, "\xE2\x96\x81");
  if (r.empty() || utf8_valid_len(r, 0) != r.size()) c.bad(field + ".replacement", "expected one character");
  return r;
}

void parse_pretokenizer(Ctx& c, const json& p, const std::string& field) {
  if (p.is_null()) return;
  std::string type = c.type_of(p, field);
  PreStep st;
  if (type == "Sequence") {
    const json& list = p.contains("pretokenizers") ? p["pretokenizers"] : json();
    if (!list.is_array()) c.bad(field + ".pretokenizers", "expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
      parse_pretokenizer(c, list[i], field + ".pretokenizers[" + std::to_string(i) + "]");
    }
    return;
  } else if (type == "Split") {
    st.kind = PreStep::Split;
    if (!p.contains("pattern")) c.bad(field + ".pattern", "missing");
    st.re = c.pattern(p["pattern"], field + ".pattern");
    st.behavior = parse_behavior(c, c.str(p, "behavior", field, "", true), field + ".behavior");
    st.invert = c.flag(p, "invert", field, false);
  } else if (type == "ByteLevel") {
    st.kind = PreStep::ByteLevel;
    st.add_prefix_space = c.flag(p, "add_prefix_space", field, true);
    st.use_regex = c.flag(p, "use_regex", field, true);
    c.byte_level = true;
  } else if (type == "Punctuation") {
    // HF: each ASCII or Unicode punctuation character is a match (PCRE2 UCP [:punct:] is \p{P}
    // plus the ASCII symbols, i.e. Rust's is_ascii_punctuation || is_punctuation).
    st.kind = PreStep::Split;
    st.re = std::make_shared<Regex>("[[:punct:]]");
    st.behavior = parse_behavior(c, c.str(p, "behavior", field, "Isolated"), field + ".behavior");
  } else if (type == "WhitespaceSplit") {
    st.kind = PreStep::Split;  // split on Unicode White_Space characters, dropping them
    st.re = std::make_shared<Regex>(
        "[\\t\\n\\x0B\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
        "\\x{205F}\\x{3000}]");
    st.behavior = SplitBehavior::Removed;
  } else if (type == "Digits") {
    st.kind = PreStep::Digits;
    st.individual_digits = c.flag(p, "individual_digits", field, false);
  } else if (type == "Metaspace") {
    st.kind = PreStep::Metaspace;
    st.replacement = parse_replacement(c, p, field);
    st.prepend = parse_prepend(c, p, field);
    st.split = c.flag(p, "split", field, true);
    st.re = std::make_shared<Regex>(st.replacement, true);
    c.impl.metaspace = st.replacement;
  } else {
    c.unsupported("pre_tokenizer", type);
  }
  c.impl.pre.push_back(std::move(st));
}

void parse_post(Ctx& c, const json& p, const std::string& field) {
  if (p.is_null()) return;
  std::string type = c.type_of(p, field);
  auto special_id = [&](const json& pair, const std::string& f) {
    if (!pair.is_array() || pair.size() != 2) c.bad(f, "expected [token, id]");
    int64_t id = c.integer(pair[1], f + "[1]");
    if (id < 0 || id >= kMaxId) c.bad(f + "[1]", std::to_string(id) + " is out of range");
    return static_cast<int32_t>(id);
  };
  if (type == "Sequence") {
    const json& list = p.contains("processors") ? p["processors"] : json();
    if (!list.is_array()) c.bad(field + ".processors", "expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
      parse_post(c, list[i], field + ".processors[" + std::to_string(i) + "]");
    }
  } else if (type == "ByteLevel") {
    // offsets only
  } else if (type == "TemplateProcessing") {
    c.template_seen = true;
    c.prefix.clear();
    c.suffix.clear();
    const json& single = p.contains("single") ? p["single"] : json();
    if (!single.is_array()) c.bad(field + ".single", "expected an array");
    const json& specials = p.contains("special_tokens") ? p["special_tokens"] : json::object();
    bool seen_a = false;
    for (size_t i = 0; i < single.size(); ++i) {
      std::string f = field + ".single[" + std::to_string(i) + "]";
      const json& piece = single[i];
      if (piece.contains("Sequence")) {
        seen_a = true;
      } else if (piece.contains("SpecialToken")) {
        std::string name = c.str(piece["SpecialToken"], "id", f + ".SpecialToken", "", true);
        if (!specials.contains(name) || !specials[name].contains("ids") || !specials[name]["ids"].is_array()) {
          c.bad(f, "special token '" + name + "' is not in " + field + ".special_tokens");
        }
        for (const json& idj : specials[name]["ids"]) {
          int64_t id = c.integer(idj, field + ".special_tokens['" + name + "'].ids");
          if (id < 0 || id >= kMaxId) c.bad(field + ".special_tokens['" + name + "'].ids", std::to_string(id) + " is out of range");
          (seen_a ? c.suffix : c.prefix).push_back(static_cast<int32_t>(id));
        }
      } else {
        c.bad(f, "expected Sequence or SpecialToken");
      }
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    c.template_seen = true;
    c.prefix = {special_id(p.value("cls", json()), field + ".cls")};
    c.suffix = {special_id(p.value("sep", json()), field + ".sep")};
  } else {
    c.unsupported("post_processor", type);
  }
}

void parse_decoder(Ctx& c, const json& d, const std::string& field) {
  if (d.is_null()) return;
  std::string type = c.type_of(d, field);
  DecStep st;
  if (type == "Sequence") {
    const json& list = d.contains("decoders") ? d["decoders"] : json();
    if (!list.is_array()) c.bad(field + ".decoders", "expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
      parse_decoder(c, list[i], field + ".decoders[" + std::to_string(i) + "]");
    }
    return;
  } else if (type == "ByteLevel") {
    st.kind = DecStep::ByteLevel;
    c.byte_level = true;
  } else if (type == "Replace") {
    st.kind = DecStep::Replace;
    st.content = c.str(d, "content", field);
    if (!d.contains("pattern")) c.bad(field + ".pattern", "missing");
    const json& p = d["pattern"];
    if (p.is_object() && p.contains("String") && p["String"].is_string()) {
      st.pattern = p["String"].get<std::string>();
    } else {
      st.re = c.pattern(p, field + ".pattern");
    }
  } else if (type == "ByteFallback") {
    st.kind = DecStep::ByteFallback;
  } else if (type == "Fuse") {
    st.kind = DecStep::Fuse;
  } else if (type == "Strip") {
    st.kind = DecStep::Strip;
    st.content = c.str(d, "content", field, " ");
    auto count = [&](const char* k) {
      auto it = d.find(k);
      if (it == d.end()) return size_t{0};
      int64_t v = c.integer(*it, field + "." + k);
      if (v < 0) c.bad(field + "." + k, "must not be negative");
      return static_cast<size_t>(v);
    };
    st.start = count("start");
    st.stop = count("stop");
  } else if (type == "Metaspace") {
    st.kind = DecStep::Metaspace;
    st.replacement = parse_replacement(c, d, field);
    st.prepend_never = parse_prepend(c, d, field) == PreStep::Never;
    c.impl.metaspace = st.replacement;
  } else {
    c.unsupported("decoder", type);
  }
  c.impl.decoders.push_back(std::move(st));
}

// bos_token etc.: a string, {"content": ...}, or null.
std::optional<std::string> config_token(const Ctx& c, const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  c.bad(key, "expected a string or {\"content\": ...}");
}

}  // namespace

void load_tokenizer_json(TokenizerImpl& im, const std::string& path) {
  json j = read_json(path);
  im.source = path;
  Ctx c{path, im};
  try {
    if (!j.is_object()) c.bad("(top level)", "expected an object");
    if (!j.contains("model")) c.bad("model", "missing");
    parse_model(c, j["model"]);
    parse_added(c, j.value("added_tokens", json()));
    parse_normalizer(c, j.value("normalizer", json()), "normalizer");
    parse_pretokenizer(c, j.value("pre_tokenizer", json()), "pre_tokenizer");
    parse_post(c, j.value("post_processor", json()), "post_processor");
    json dec = j.value("decoder", json());
    im.has_decoder = !dec.is_null();
    parse_decoder(c, dec, "decoder");
  } catch (const json::exception& e) {
    fail("tokenizer file '", path, "': ", e.what());
  }
  im.kind = c.byte_level ? TokenizerKind::ByteLevelBPE : TokenizerKind::SentencePieceBPE;
  im.finish();
  for (int32_t id : c.prefix) im.check_id(id, "post_processor special token");
  for (int32_t id : c.suffix) im.check_id(id, "post_processor special token");
  if (c.template_seen) {
    im.has_template = true;
    im.bos_prefix = c.prefix;
    im.eos_suffix = c.suffix;
    im.add_bos = !c.prefix.empty();
    im.add_eos = !c.suffix.empty();
    if (!c.prefix.empty()) im.bos = c.prefix.front();
    if (!c.suffix.empty()) im.eos = c.suffix.back();
  }
}

void load_tokenizer_config(TokenizerImpl& im, const std::string& path) {
  json j = read_json(path);
  Ctx c{path, im};
  if (!j.is_object()) c.bad("(top level)", "expected an object");
  auto lookup = [&](const char* key) -> std::optional<int32_t> {
    auto content = config_token(c, j, key);
    if (!content) return std::nullopt;
    auto a = im.added_by_text.find(*content);
    if (a != im.added_by_text.end()) return a->second;
    auto m = im.model.vocab.find(*content);
    if (m != im.model.vocab.end()) return m->second;
    c.bad(key, "'" + *content + "' is not in the vocabulary");
  };
  if (j.contains("bos_token")) im.bos = lookup("bos_token");
  if (j.contains("eos_token")) im.eos = lookup("eos_token");
  if (j.contains("unk_token")) im.unk = lookup("unk_token");
  if (j.contains("pad_token")) im.pad = lookup("pad_token");
  // A TemplateProcessing post-processor in tokenizer.json decides; otherwise add_*_token does.
  if (!im.has_template) {
    im.add_bos = c.flag(j, "add_bos_token", "(top level)", false);
    im.add_eos = c.flag(j, "add_eos_token", "(top level)", false);
    if (im.add_bos && !im.bos) c.bad("add_bos_token", "true but bos_token is not set");
    if (im.add_eos && !im.eos) c.bad("add_eos_token", "true but eos_token is not set");
    if (im.add_eos) im.eos_suffix = {*im.eos};
  }
}

}  // namespace graft::text::detail

// Tokenizer: the encode pipeline (added tokens -> normalizer -> pre-tokenizer -> BPE -> post
// processor) and the public accessors. Loading lives in tokenizer_json.cpp / tokenizer_spec.cpp,
// decoding in tokenizer_decode.cpp.
#include "graft/text/tokenizer.h"

#include "graft/core/error.h"
#include "text/tokenizer_internal.h"

namespace graft::text {

namespace detail {

namespace {
constexpr size_t kCacheMaxWord = 256;     // HF BPE caches words shorter than this...
constexpr size_t kCacheCapacity = 10000;  // ...up to this many
}  // namespace

void TokenizerImpl::check_id(int32_t id, const char* what) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token.size()) {
    fail(source, ": ", what, ": token id ", id, " is out of range [0, ", id_to_token.size(), ")");
  }
}

void TokenizerImpl::finish() {
  added_by_text.clear();
  raw_matcher = AddedMatcher();
  normalized_matcher = AddedMatcher();
  for (size_t i = 0; i < added.size(); ++i) {
    const AddedInfo& a = added[i];
    check_id(a.id, "added token");
    added_by_text.emplace(a.content, a.id);
    id_to_token[a.id] = a.content;
    id_added[a.id] = a.special ? 2 : 1;
    if (a.normalized) {
      std::string pattern = a.content;
      normalize(normalizers, pattern);
      normalized_matcher.add(pattern, static_cast<int32_t>(i));
    } else {
      raw_matcher.add(a.content, static_cast<int32_t>(i));
    }
  }
  model.index_byte_tokens();
}

void TokenizerImpl::encode_word(const std::string& word, std::vector<int32_t>& out) const {
  if (word.size() >= kCacheMaxWord) {
    model.tokenize(word, out);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    auto it = cache.find(word);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  model.tokenize(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mu);
  if (cache.size() < kCacheCapacity) cache.emplace(word, std::move(ids));
}

void TokenizerImpl::encode_text(std::string_view text, bool parse_special,
                                std::vector<int32_t>& out) const {
  for (const AddedMatcher::Seg& s1 : raw_matcher.split(text, added, parse_special)) {
    if (s1.token >= 0) {
      out.push_back(added[s1.token].id);
      continue;
    }
    std::string norm(text.substr(s1.start, s1.end - s1.start));
    if (norm.empty()) continue;
    normalize(normalizers, norm);
    for (const AddedMatcher::Seg& s2 : normalized_matcher.split(norm, added, parse_special)) {
      if (s2.token >= 0) {
        out.push_back(added[s2.token].id);
        continue;
      }
      std::vector<Piece> pieces;
      pieces.push_back({norm.substr(s2.start, s2.end - s2.start), s1.start == 0 && s2.start == 0});
      if (pieces[0].text.empty()) continue;
      pretokenize(pre, pieces);
      for (const Piece& p : pieces) encode_word(p.text, out);
    }
  }
}

}  // namespace detail

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_spec(TokenizerSpec spec) {
  Tokenizer t;
  detail::load_spec(*t.impl_, std::move(spec));
  return t;
}

Tokenizer Tokenizer::from_files(const std::string& tokenizer_json,
                                const std::string& tokenizer_config_json) {
  Tokenizer t;
  detail::load_tokenizer_json(*t.impl_, tokenizer_json);
  if (!tokenizer_config_json.empty()) detail::load_tokenizer_config(*t.impl_, tokenizer_config_json);
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special,
                                       std::optional<bool> add_bos) const {
  const Impl& im = *impl_;
  std::vector<int32_t> out;
  bool specials = add_bos.value_or(im.add_bos);
  if (specials) {
    if (!im.bos_prefix.empty()) {
      out = im.bos_prefix;
    } else if (im.bos) {
      out.push_back(*im.bos);
    } else if (add_bos.has_value()) {
      fail(im.source, ": add_bos requested but the tokenizer has no BOS token");
    }
  }
  // The pipeline (PCRE2 in UTF mode) needs valid UTF-8: invalid bytes become U+FFFD.
  if (detail::utf8_valid(text)) {
    im.encode_text(text, parse_special, out);
  } else {
    im.encode_text(detail::utf8_lossy(text), parse_special, out);
  }
  // Suffix ids (e.g. a template "$A </s>") follow the same switch, as HF add_special_tokens does;
  // an explicit add_bos=false turns both off.
  if (im.add_eos && add_bos.value_or(true)) out.insert(out.end(), im.eos_suffix.begin(), im.eos_suffix.end());
  return out;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_to_token.size()); }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }
std::optional<int32_t> Tokenizer::added_bos() const {
  if (!impl_->add_bos) return std::nullopt;
  return impl_->bos_prefix.empty() ? impl_->bos : std::optional<int32_t>(impl_->bos_prefix.front());
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  auto a = impl_->added_by_text.find(token);
  if (a != impl_->added_by_text.end()) return a->second;
  auto m = impl_->model.vocab.find(token);
  if (m != impl_->model.vocab.end()) return m->second;
  return std::nullopt;
}

const std::string& Tokenizer::token_text(int32_t id) const {
  impl_->check_id(id, "token_text");
  return impl_->id_to_token[id];
}

bool Tokenizer::is_special(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return false;
  return impl_->id_added[id] == 2;
}

}  // namespace graft::text

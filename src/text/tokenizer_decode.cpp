// Decoding: the tokenizer.json decoder chain (ByteLevel, Replace, ByteFallback, Fuse, Strip,
// Metaspace) on token strings, per-token raw bytes, and the streaming decoder.
#include "graft/core/error.h"
#include "text/tokenizer_internal.h"

namespace graft::text {

namespace detail {

namespace {

std::string replace_all_literal(const std::string& s, const std::string& pat,
                                const std::string& with) {
  if (pat.empty()) return s;
  std::string out;
  size_t prev = 0;
  for (size_t pos = s.find(pat); pos != std::string::npos; pos = s.find(pat, prev)) {
    out.append(s, prev, pos - prev);
    out += with;
    prev = pos + pat.size();
  }
  out.append(s, prev);
  return out;
}

// "<0xAB>" -> 0xAB (HF accepts either hex case); -1 otherwise.
int parse_byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void flush_bytes(std::string& bytes, std::vector<std::string>& out) {
  if (bytes.empty()) return;
  if (utf8_valid(bytes)) {
    out.push_back(bytes);
  } else {
    for (size_t i = 0; i < bytes.size(); ++i) out.push_back("\xEF\xBF\xBD");
  }
  bytes.clear();
}

// Splits a string into its UTF-8 characters (as substrings).
std::vector<std::string_view> chars_of(std::string_view s) {
  std::vector<std::string_view> cs;
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_valid_len(s, i);
    if (n == 0) n = 1;
    cs.push_back(s.substr(i, n));
    i += n;
  }
  return cs;
}

}  // namespace

std::string run_decoders(const std::vector<DecStep>& steps, std::vector<std::string> tokens) {
  for (const DecStep& st : steps) {
    std::vector<std::string> next;
    switch (st.kind) {
      case DecStep::ByteLevel: {
        std::string bytes;
        for (const std::string& t : tokens) {
          if (!byte_level_decode(t, bytes)) bytes += t;
        }
        next.push_back(utf8_lossy(bytes));
        break;
      }
      case DecStep::Replace:
        for (std::string& t : tokens) {
          next.push_back(st.re ? st.re->replace_all(t, st.content)
                               : replace_all_literal(t, st.pattern, st.content));
        }
        break;
      case DecStep::ByteFallback: {
        std::string bytes;
        for (std::string& t : tokens) {
          int b = parse_byte_token(t);
          if (b >= 0) {
            bytes += static_cast<char>(b);
          } else {
            flush_bytes(bytes, next);
            next.push_back(std::move(t));
          }
        }
        flush_bytes(bytes, next);
        break;
      }
      case DecStep::Fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        next.push_back(std::move(all));
        break;
      }
      case DecStep::Strip:
        for (const std::string& t : tokens) {
          std::vector<std::string_view> cs = chars_of(t);
          size_t a = 0, b = cs.size();
          for (size_t i = 0; i < st.start && a < b && cs[a] == st.content; ++i) ++a;
          for (size_t i = 0; i < st.stop && b > a && cs[b - 1] == st.content; ++i) --b;
          std::string s;
          for (size_t i = a; i < b; ++i) s += cs[i];
          next.push_back(std::move(s));
        }
        break;
      case DecStep::Metaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          // HF drops every replacement character of the first token (not only a leading one).
          bool drop = i == 0 && !st.prepend_never;
          next.push_back(replace_all_literal(tokens[i], st.replacement, drop ? "" : " "));
        }
        break;
    }
    tokens.swap(next);
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace detail

std::string Tokenizer::token_bytes(int32_t id) const {
  impl_->check_id(id, "token_bytes");
  const std::string& t = impl_->id_to_token[id];
  if (impl_->id_added[id] != 0) return t;
  if (impl_->kind == TokenizerKind::ByteLevelBPE) {
    std::string out;
    if (detail::byte_level_decode(t, out)) return out;
    return t;
  }
  int b = detail::parse_byte_token(t);
  if (b >= 0) return std::string(1, static_cast<char>(b));
  return detail::replace_all_literal(t, impl_->metaspace, " ");
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const { return decode(ids, false); }

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    impl_->check_id(id, "decode");
    if (skip_special && impl_->id_added[id] == 2) continue;
    tokens.push_back(impl_->id_to_token[id]);
  }
  if (!impl_->has_decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  return detail::run_decoders(impl_->decoders, std::move(tokens));
}

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_.token_bytes(id);
  size_t consumed = 0;
  std::string out = detail::utf8_lossy(pending_, /*final=*/false, &consumed);
  pending_.erase(0, consumed);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = detail::utf8_lossy(pending_, /*final=*/true);
  pending_.clear();
  return out;
}

}  // namespace graft::text

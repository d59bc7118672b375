// PCRE2 wrapper for pre-tokenizer split patterns (UTF + UCP, JIT-compiled when available), and
// the split patterns of the common byte-level BPE tokenizers.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "graft/core/error.h"
#include "text/tokenizer_internal.h"

namespace graft::text::detail {

// GPT-2 (HF ByteLevel use_regex=true; also SmolLM2 / StarCoder after the Digits split).
const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama-3: case-insensitive contractions, digits in groups of up to three.
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2: as Llama-3 but single digits.
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {
pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }

struct MatchData {
  pcre2_match_data* md;
  explicit MatchData(const pcre2_code* code) : md(pcre2_match_data_create_from_pattern(code, nullptr)) {
    if (!md) fail("regex: out of memory creating match data");
  }
  ~MatchData() { pcre2_match_data_free(md); }
};

std::string pcre2_message(int rc) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(rc, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}
}  // namespace

Regex::Regex(std::string_view pattern, bool literal) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE off = 0;
  uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                                   opts, &err, &off, nullptr);
  if (!code) {
    fail("regex '", pattern_, "': ", pcre2_message(err), " at offset ", off);
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional: falls back to the interpreter
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(as_code(code_)); }

bool Regex::find(std::string_view s, size_t start, size_t& mstart, size_t& mend,
                 void* match_data) const {
  auto* md = static_cast<pcre2_match_data*>(match_data);
  auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  uint32_t opts = start > 0 ? PCRE2_NO_UTF_CHECK : 0;
  int rc = pcre2_match(as_code(code_), subject, s.size(), start, opts, md, nullptr);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
    rc = pcre2_match(as_code(code_), subject, s.size(), start, opts | PCRE2_NO_JIT, md, nullptr);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) fail("regex '", pattern_, "': match failed: ", pcre2_message(rc));
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  mstart = ov[0];
  mend = ov[1];
  return true;
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view s) const {
  std::vector<std::pair<size_t, size_t>> out;
  // One match data per call keeps matching thread-safe; it is small.
  MatchData m(as_code(code_));
  size_t pos = 0, a = 0, b = 0;
  while (pos <= s.size() && find(s, pos, a, b, m.md)) {
    out.emplace_back(a, b);
    if (b > a) {
      pos = b;
    } else {  // empty match: step over one character
      if (a >= s.size()) break;
      size_t n = utf8_valid_len(s, a);
      pos = a + (n ? n : 1);
    }
  }
  return out;
}

std::string Regex::replace_all(std::string_view s, std::string_view with) const {
  std::string out;
  size_t prev = 0;
  for (auto [a, b] : find_all(s)) {
    out.append(s.substr(prev, a - prev));
    out.append(with);
    prev = b;
  }
  out.append(s.substr(prev));
  return out;
}

}  // namespace graft::text::detail

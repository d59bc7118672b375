// Added-token splitting: leftmost-longest matching of added tokens in the text (HF's
// AddedVocabulary with an Aho-Corasick LeftmostLongest automaton), honouring special-token
// parsing, lstrip/rstrip and single_word.
#include <algorithm>

#include "text/tokenizer_internal.h"

namespace graft::text::detail {

namespace {

// Start of the character that ends just before s[end].
size_t prev_char_start(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80 && end - i < 4) --i;
  return i;
}

// Byte offset where the run of whitespace ending at `end` starts (HF: `\s*$` on s[..end]).
size_t whitespace_run_start(std::string_view s, size_t end) {
  while (end > 0) {
    size_t b = prev_char_start(s, end);
    size_t j = b;
    if (utf8_valid_len(s, b) != end - b || !is_unicode_whitespace(utf8_next(s, j))) break;
    end = b;
  }
  return end;
}

// Byte offset where the run of whitespace starting at `start` ends (HF: `^\s*` on s[start..]).
size_t whitespace_run_end(std::string_view s, size_t start) {
  while (start < s.size()) {
    size_t n = utf8_valid_len(s, start);
    size_t j = start;
    if (n == 0 || !is_unicode_whitespace(utf8_next(s, j))) break;
    start += n;
  }
  return start;
}

bool is_word_char(std::string_view ch) {
  static const Regex word("^\\w$");
  return !ch.empty() && !word.find_all(ch).empty();
}

bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t b = prev_char_start(s, s.size());
  return is_word_char(s.substr(b));
}

bool starts_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t n = utf8_valid_len(s, 0);
  return is_word_char(s.substr(0, n ? n : 1));
}

}  // namespace

void AddedMatcher::add(const std::string& pattern, int32_t index) {
  if (pattern.empty()) return;
  int32_t cur = 0;
  for (unsigned char c : pattern) {
    auto it = nodes_[cur].next.find(c);
    if (it == nodes_[cur].next.end()) {
      int32_t n = static_cast<int32_t>(nodes_.size());
      nodes_[cur].next.emplace(c, n);
      nodes_.emplace_back();
      cur = n;
    } else {
      cur = it->second;
    }
  }
  if (nodes_[cur].token < 0) nodes_[cur].token = index;
}

std::vector<AddedMatcher::Seg> AddedMatcher::split(std::string_view text,
                                                   const std::vector<AddedInfo>& tokens,
                                                   bool parse_special) const {
  std::vector<Seg> out;
  size_t start_offset = 0;  // end of the last emitted token (after rstrip)
  size_t pos = 0;           // where the next automaton match may start
  const Node& root = nodes_[0];
  while (pos < text.size() && !empty()) {
    // Leftmost start with any match, longest match there.
    size_t mstart = 0, mend = 0;
    int32_t tok = -1;
    for (size_t i = pos; i < text.size() && tok < 0; ++i) {
      auto it0 = root.next.find(static_cast<uint8_t>(text[i]));
      if (it0 == root.next.end()) continue;
      int32_t cur = it0->second;
      for (size_t j = i + 1;; ++j) {
        if (nodes_[cur].token >= 0) tok = nodes_[cur].token, mstart = i, mend = j;
        if (j >= text.size()) break;
        auto it = nodes_[cur].next.find(static_cast<uint8_t>(text[j]));
        if (it == nodes_[cur].next.end()) break;
        cur = it->second;
      }
    }
    if (tok < 0) break;
    pos = mend;
    const AddedInfo& info = tokens[tok];
    if (info.special && !parse_special) continue;
    if (info.single_word) {
      bool start_space = mstart == 0 || !ends_with_word(text.substr(0, mstart));
      bool stop_space = mend == text.size() || !starts_with_word(text.substr(mend));
      if (!start_space || !stop_space) continue;
    }
    size_t start = mstart, stop = mend;
    if (info.lstrip) start = std::max(whitespace_run_start(text, start), start_offset);
    if (info.rstrip) stop = whitespace_run_end(text, stop);
    if (start < start_offset) start = start_offset;  // overlaps a previous rstrip: clamp
    if (start_offset < start) out.push_back({-1, start_offset, start});
    out.push_back({tok, start, stop});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({-1, start_offset, text.size()});
  return out;
}

}  // namespace graft::text::detail

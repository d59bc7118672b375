// Normalizers (Prepend, Replace, NFC) and pre-tokenizers (Split, ByteLevel, Digits, Metaspace),
// following the semantics of HF tokenizers' NormalizedString::split and friends.
#include <algorithm>

#include "graft/core/error.h"
#include "text/tokenizer_internal.h"

namespace graft::text::detail {

namespace {

std::string replace_literal(std::string_view s, std::string_view pat, std::string_view with) {
  if (pat.empty()) return std::string(s);
  std::string out;
  size_t prev = 0;
  for (size_t pos = s.find(pat); pos != std::string_view::npos; pos = s.find(pat, prev)) {
    out.append(s.substr(prev, pos - prev));
    out.append(with);
    prev = pos + pat.size();
  }
  out.append(s.substr(prev));
  return out;
}

// Turns regex matches into a cover of the whole string: (start, end, is_match) slices.
std::vector<Match> cover(std::string_view s, const std::vector<std::pair<size_t, size_t>>& found) {
  std::vector<Match> out;
  if (s.empty()) {
    out.push_back({0, 0, false});
    return out;
  }
  size_t prev = 0;
  for (auto [a, b] : found) {
    if (prev != a) out.push_back({prev, a, false});
    out.push_back({a, b, true});
    prev = b;
  }
  if (prev != s.size()) out.push_back({prev, s.size(), false});
  return out;
}

const Regex& gpt2_regex() {
  static const Regex re(kGpt2Pattern);
  return re;
}

const Regex& numeric_regex() {
  static const Regex re("\\p{N}");
  return re;
}

}  // namespace

void normalize(const std::vector<NormStep>& steps, std::string& s) {
  for (const NormStep& st : steps) {
    switch (st.kind) {
      case NormStep::Prepend:
        if (!s.empty()) s = st.text + s;
        break;
      case NormStep::Replace:
        s = st.re ? st.re->replace_all(s, st.content) : replace_literal(s, st.text, st.content);
        break;
      case NormStep::NFC:
        nfc_normalize(s);
        break;
    }
  }
}

std::vector<Piece> split_piece(const Piece& p, const std::vector<Match>& matches,
                               SplitBehavior behavior) {
  struct Slice {
    size_t start, end;
    bool remove;
  };
  std::vector<Slice> splits;
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const Match& m : matches) splits.push_back({m.start, m.end, false});
      break;
    case SplitBehavior::Removed:
      for (const Match& m : matches) splits.push_back({m.start, m.end, m.is_match});
      break;
    case SplitBehavior::Contiguous: {
      bool prev_match = false;
      for (const Match& m : matches) {
        if (m.is_match == prev_match && !splits.empty()) {
          splits.back().end = m.end;
        } else {
          splits.push_back({m.start, m.end, false});
        }
        prev_match = m.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithPrevious: {
      bool prev_match = false;
      for (const Match& m : matches) {
        if (m.is_match && !prev_match && !splits.empty()) {
          splits.back().end = m.end;
        } else {
          splits.push_back({m.start, m.end, false});
        }
        prev_match = m.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool prev_match = false;
      for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
        if (it->is_match && !prev_match && !splits.empty()) {
          splits.back().start = it->start;
        } else {
          splits.push_back({it->start, it->end, false});
        }
        prev_match = it->is_match;
      }
      std::reverse(splits.begin(), splits.end());
      break;
    }
  }
  std::vector<Piece> out;
  for (const Slice& sl : splits) {
    if (sl.remove || sl.end <= sl.start) continue;
    out.push_back({p.text.substr(sl.start, sl.end - sl.start), p.at_origin && sl.start == 0});
  }
  return out;
}

namespace {

template <typename F>
void for_each_split(std::vector<Piece>& pieces, F&& split_one) {
  std::vector<Piece> next;
  next.reserve(pieces.size());
  for (Piece& p : pieces) {
    std::vector<Piece> parts = split_one(p);
    for (Piece& q : parts) {
      if (!q.text.empty()) next.push_back(std::move(q));
    }
  }
  pieces.swap(next);
}

std::vector<Piece> regex_split(const Piece& p, const Regex& re, SplitBehavior behavior,
                               bool invert) {
  std::vector<Match> m = cover(p.text, re.find_all(p.text));
  if (invert) {
    for (Match& x : m) x.is_match = !x.is_match;
  }
  return split_piece(p, m, behavior);
}

}  // namespace

void pretokenize(const std::vector<PreStep>& steps, std::vector<Piece>& pieces) {
  for (const PreStep& st : steps) {
    switch (st.kind) {
      case PreStep::Split:
        for_each_split(pieces, [&](const Piece& p) {
          return regex_split(p, *st.re, st.behavior, st.invert);
        });
        break;
      case PreStep::Digits:
        for_each_split(pieces, [&](const Piece& p) {
          return regex_split(p, numeric_regex(),
                             st.individual_digits ? SplitBehavior::Isolated
                                                  : SplitBehavior::Contiguous,
                             false);
        });
        break;
      case PreStep::ByteLevel:
        for_each_split(pieces, [&](Piece& p) {
          if (st.add_prefix_space && (p.text.empty() || p.text[0] != ' ')) p.text = " " + p.text;
          std::vector<Piece> parts;
          if (st.use_regex) {
            parts = regex_split(p, gpt2_regex(), SplitBehavior::Isolated, false);
          } else {
            parts.push_back(std::move(p));
          }
          for (Piece& q : parts) q.text = byte_level_encode(q.text);
          return parts;
        });
        break;
      case PreStep::Metaspace: {
        for_each_split(pieces, [&](Piece& p) {
          p.text = replace_literal(p.text, " ", st.replacement);
          bool starts = p.text.compare(0, st.replacement.size(), st.replacement) == 0;
          if (!starts && (st.prepend == PreStep::Always ||
                          (st.prepend == PreStep::First && p.at_origin))) {
            p.text = st.replacement + p.text;
          }
          if (!st.split) return std::vector<Piece>{std::move(p)};
          return split_piece(p, cover(p.text, st.re->find_all(p.text)), SplitBehavior::MergedWithNext);
        });
        break;
      }
    }
  }
}

}  // namespace graft::text::detail

// UTF-8 helpers and the GPT-2 bytes-to-unicode table used by byte-level BPE.
#include <array>

#include "graft/core/utf8.h"
#include "text/tokenizer_internal.h"

namespace graft::text::detail {

void utf8_append(std::string& out, char32_t cp) { graft::append_utf8(out, cp); }

char32_t utf8_next(std::string_view s, size_t& i) {
  auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  uint8_t c = b(0);
  char32_t cp;
  if (c < 0x80) {
    cp = c;
    i += 1;
  } else if (c < 0xE0) {
    cp = ((c & 0x1Fu) << 6) | (b(1) & 0x3Fu);
    i += 2;
  } else if (c < 0xF0) {
    cp = ((c & 0x0Fu) << 12) | ((b(1) & 0x3Fu) << 6) | (b(2) & 0x3Fu);
    i += 3;
  } else {
    cp = ((c & 0x07u) << 18) | ((b(1) & 0x3Fu) << 12) | ((b(2) & 0x3Fu) << 6) | (b(3) & 0x3Fu);
    i += 4;
  }
  return cp;
}

namespace {

// Checks the sequence at s[i]: returns the number of bytes forming a valid prefix of a character
// (the "maximal subpart") in `valid`, and the full length the lead byte asks for in `need`
// (0 if the lead byte can never start a character).
void utf8_probe(std::string_view s, size_t i, size_t& valid, size_t& need) {
  uint8_t c = static_cast<uint8_t>(s[i]);
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c < 0x80) {
    valid = need = 1;
    return;
  } else if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    valid = 0;
    need = 0;
    return;
  }
  valid = 1;
  for (size_t k = 1; k < need && i + k < s.size(); ++k) {
    uint8_t x = static_cast<uint8_t>(s[i + k]);
    uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (x < l || x > h) break;
    ++valid;
  }
}

}  // namespace

size_t utf8_valid_len(std::string_view s, size_t i) {
  size_t valid, need;
  utf8_probe(s, i, valid, need);
  return need != 0 && valid == need ? need : 0;
}

bool utf8_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_valid_len(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string utf8_lossy(std::string_view s, bool final, size_t* consumed) {
  static const char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t valid, need;
    utf8_probe(s, i, valid, need);
    if (need != 0 && valid == need) {
      out.append(s.substr(i, need));
      i += need;
    } else if (need != 0 && i + valid == s.size() && !final) {
      break;  // incomplete so far, may still be completed by later bytes
    } else {
      out += kReplacement;
      i += valid == 0 ? 1 : valid;
    }
  }
  if (consumed) *consumed = i;
  return out;
}

bool is_unicode_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// ---- GPT-2 byte table ------------------------------------------------------------------------

namespace {

struct ByteTable {
  std::array<char32_t, 256> to_cp{};
  std::array<std::string, 256> to_utf8;
  std::array<int16_t, 512> from_cp{};  // code point (< 512) -> byte, -1 if none

  ByteTable() {
    // Printable bytes map to themselves; the rest, in order, to U+0100, U+0101, ...
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    from_cp.fill(-1);
    char32_t n = 0;
    for (int b = 0; b < 256; ++b) {
      char32_t cp = printable(b) ? static_cast<char32_t>(b) : 256 + n++;
      to_cp[b] = cp;
      utf8_append(to_utf8[b], cp);
      from_cp[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteTable& table() {
  static const ByteTable t;
  return t;
}

}  // namespace

char32_t byte_to_unicode(uint8_t b) { return table().to_cp[b]; }

std::string byte_level_encode(std::string_view bytes) {
  const ByteTable& t = table();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) out += t.to_utf8[c];
  return out;
}

bool byte_level_decode(std::string_view text, std::string& out) {
  const ByteTable& t = table();
  std::string tmp;
  tmp.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (utf8_valid_len(text, i) == 0) return false;
    char32_t cp = utf8_next(text, i);
    if (cp >= 512 || t.from_cp[cp] < 0) return false;
    tmp += static_cast<char>(t.from_cp[cp]);
  }
  out += tmp;
  return true;
}

}  // namespace graft::text::detail

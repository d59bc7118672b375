#include "text/jinja/strutil.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "graft/core/utf8.h"

namespace graft::text::jinja {

size_t utf8_char_len(std::string_view s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return 1;
  return n;
}

uint32_t utf8_next(std::string_view s, size_t& i) {
  size_t n = utf8_char_len(s, i);
  unsigned char c = static_cast<unsigned char>(s[i]);
  uint32_t cp;
  if (n == 1) {
    cp = c;
  } else {
    cp = c & (0x7f >> n);
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
  }
  i += n;
  return cp;
}

void append_utf8(std::string& out, uint32_t cp) { graft::append_utf8(out, static_cast<char32_t>(cp)); }

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += utf8_char_len(s, i)) ++n;
  return n;
}

std::vector<std::string> utf8_chars(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_char_len(s, i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

bool is_py_space(uint32_t cp) {
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f)) return true;
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

std::string py_strip(std::string_view s, bool left, bool right, const std::string* chars) {
  std::vector<uint32_t> set;
  if (chars)
    for (size_t i = 0; i < chars->size();) set.push_back(utf8_next(*chars, i));
  auto strip_cp = [&](uint32_t cp) {
    if (!chars) return is_py_space(cp);
    for (uint32_t c : set)
      if (c == cp) return true;
    return false;
  };
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      size_t i = begin;
      if (!strip_cp(utf8_next(s, i))) break;
      begin = i;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;  // find the start of the last code point
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80 && end - start < 4)
        --start;
      size_t i = start;
      uint32_t cp = utf8_next(s, i);
      if (i != end) {  // not a well-formed sequence ending at `end`: treat the last byte alone
        start = end - 1;
        cp = static_cast<unsigned char>(s[start]);
      }
      if (!strip_cp(cp)) break;
      end = start;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

uint32_t cp_upper(uint32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 32;
  if (cp < 0xb5) return cp;
  if (cp == 0xb5) return 0x39c;
  if (cp >= 0xe0 && cp <= 0xfe && cp != 0xf7) return cp - 32;
  if (cp == 0xff) return 0x178;
  if (cp >= 0x100 && cp <= 0x17f && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149 &&
      cp != 0x17f) {
    // Latin Extended-A pairs: even = upper, odd = lower (with the 0x139..0x148, 0x179..0x17e shift).
    bool shifted = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17e);
    if (shifted ? (cp % 2 == 0) : (cp % 2 == 1)) return cp - 1;
    return cp;
  }
  if (cp >= 0x3b1 && cp <= 0x3c9 && cp != 0x3c2) return cp - 32;
  if (cp == 0x3c2) return 0x3a3;
  if (cp >= 0x430 && cp <= 0x44f) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45f) return cp - 80;
  return cp;
}

uint32_t cp_lower(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp < 0xc0) return cp;
  if (cp >= 0xc0 && cp <= 0xde && cp != 0xd7) return cp + 32;
  if (cp == 0x178) return 0xff;
  if (cp >= 0x100 && cp <= 0x17f && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149 &&
      cp != 0x17f) {
    bool shifted = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17e);
    if (shifted ? (cp % 2 == 1) : (cp % 2 == 0)) return cp + 1;
    return cp;
  }
  if (cp >= 0x391 && cp <= 0x3a9 && cp != 0x3a2) return cp + 32;
  if (cp >= 0x410 && cp <= 0x42f) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40f) return cp + 80;
  return cp;
}

bool cp_is_upper(uint32_t cp) { return cp_lower(cp) != cp; }
bool cp_is_lower(uint32_t cp) { return cp_upper(cp) != cp || cp == 0xdf; }

static std::string map_case(std::string_view s, bool upper) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    uint32_t cp = utf8_next(s, i);
    if (i - start == 1 && cp >= 0x80) {  // invalid byte: copy as is
      out += s[start];
      continue;
    }
    if (upper && cp == 0xdf) {  // German sharp s upper-cases to "SS"
      out += "SS";
      continue;
    }
    append_utf8(out, upper ? cp_upper(cp) : cp_lower(cp));
  }
  return out;
}

std::string py_upper(std::string_view s) { return map_case(s, true); }
std::string py_lower(std::string_view s) { return map_case(s, false); }

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+02"
  std::string out;
  size_t p = 0;
  if (sci[0] == '-') {
    out += '-';
    p = 1;
  }
  size_t epos = sci.find('e');
  std::string digits;
  for (size_t i = p; i < epos; ++i)
    if (sci[i] != '.') digits += sci[i];
  int exp = std::stoi(sci.substr(epos + 1));
  int decpt = exp + 1;  // position of the decimal point relative to the digits
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1);
    }
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return out;
}

// Python's str.isprintable() approximated for the code points chat text contains.
static bool cp_printable(uint32_t cp) {
  if (cp < 0x20 || cp == 0x7f) return false;
  if (cp >= 0x80 && cp <= 0xa0) return false;
  if (cp == 0xad || (cp >= 0x200b && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202e)) return false;
  if ((cp >= 0x2060 && cp <= 0x206f) || cp == 0xfeff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
  if (cp >= 0x2000 && cp <= 0x200a) return false;  // spaces other than ' ' are not printable
  if (cp == 0x1680 || cp == 0x202f || cp == 0x205f || cp == 0x3000) return false;
  return true;
}

std::string string_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    uint32_t cp = utf8_next(s, i);
    char buf[16];
    if (cp == static_cast<uint32_t>(q) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (i - start == 1 && cp >= 0x80) {  // invalid byte (Python would show a surrogate)
      std::snprintf(buf, sizeof buf, "\\udc%02x", cp);
      out += buf;
    } else if (!cp_printable(cp)) {
      if (cp < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", cp);
      else if (cp < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      else std::snprintf(buf, sizeof buf, "\\U%08x", cp);
      out += buf;
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  out += q;
  return out;
}

void json_quote(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    uint32_t c = utf8_next(s, i);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c >= 0x80 && c < 0x10000)) {
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else if (ensure_ascii && c >= 0x10000) {
          uint32_t v = c - 0x10000;
          std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
          out += buf;
        } else {
          out.append(s.substr(start, i - start));
        }
    }
  }
  out += '"';
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view rep, long count) {
  std::string out;
  if (old.empty()) {  // Python inserts `rep` before every character and at the end
    auto chars = utf8_chars(s);
    long done = 0;
    for (const auto& c : chars) {
      if (count < 0 || done < count) {
        out += rep;
        ++done;
      }
      out += c;
    }
    if (count < 0 || done < count) out += rep;
    return out;
  }
  size_t pos = 0;
  long done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(rep);
    pos = hit + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

std::vector<std::string> py_split(std::string_view s, const std::string* sep, long maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<long>(out.size()) < maxsplit) {
      size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  size_t i = 0;
  auto skip_space = [&] {
    while (i < s.size()) {
      size_t j = i;
      if (!is_py_space(utf8_next(s, j))) break;
      i = j;
    }
  };
  skip_space();
  while (i < s.size()) {
    if (maxsplit >= 0 && static_cast<long>(out.size()) >= maxsplit) {
      out.emplace_back(s.substr(i));
      break;
    }
    size_t start = i;
    while (i < s.size()) {
      size_t j = i;
      if (is_py_space(utf8_next(s, j))) break;
      i = j;
    }
    out.emplace_back(s.substr(start, i - start));
    skip_space();
  }
  return out;
}

}  // namespace graft::text::jinja

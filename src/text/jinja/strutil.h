// String helpers with Python semantics for the Jinja interpreter: UTF-8 code point handling,
// str.isspace/strip/upper/lower, and the exact text Python's repr() and json.dumps() produce.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace graft::text::jinja {

// Byte length of the UTF-8 sequence starting at s[i] (1 for an invalid byte, so any byte string
// splits into "characters" and re-joins unchanged).
size_t utf8_char_len(std::string_view s, size_t i);
// Decodes the code point at s[i] and advances i; an invalid byte decodes as itself (0x80..0xff).
uint32_t utf8_next(std::string_view s, size_t& i);
void append_utf8(std::string& out, uint32_t cp);
// Number of code points (Python len()).
size_t utf8_length(std::string_view s);
// The string split into code points, each as its UTF-8 bytes.
std::vector<std::string> utf8_chars(std::string_view s);

// Python str.isspace() for one code point.
bool is_py_space(uint32_t cp);
// Python str.strip()/lstrip()/rstrip(); chars == nullptr strips whitespace.
std::string py_strip(std::string_view s, bool left, bool right, const std::string* chars = nullptr);
// Python str.upper()/lower() for ASCII, Latin-1, Greek and Cyrillic letters; others unchanged.
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
uint32_t cp_upper(uint32_t cp);
uint32_t cp_lower(uint32_t cp);
bool cp_is_upper(uint32_t cp);
bool cp_is_lower(uint32_t cp);

// Python float.__repr__ (shortest round-trip): 1.0, 0.1, 1e+16, 1e-05, nan, inf.
std::string float_repr(double d);
// Python repr() of a str: 'it' / "it's" with Python's escapes.
std::string string_repr(std::string_view s);
// Appends s as a JSON string literal the way json.dumps(..., ensure_ascii=...) writes it.
void json_quote(std::string& out, std::string_view s, bool ensure_ascii = false);

// Python's str.replace(old, new, count) with count < 0 meaning all.
std::string py_replace(std::string_view s, std::string_view old, std::string_view rep, long count);
// Python str.split(sep, maxsplit): sep == nullptr splits on whitespace runs.
std::vector<std::string> py_split(std::string_view s, const std::string* sep, long maxsplit);

}  // namespace graft::text::jinja

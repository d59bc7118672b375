// ASCII case folding for names users type (option values, file extensions): locale-independent.
#pragma once
#include <cctype>
#include <string>
#include <string_view>

namespace graft {

inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

}  // namespace graft

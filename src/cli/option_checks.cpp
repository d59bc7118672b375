#include "cli/option_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace graft::cli {

namespace {
std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
}  // namespace

CLI::Validator number_in(double lo, double hi) {
  const std::string range = "[" + num(lo) + ", " + num(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || v < lo || v > hi)
          return "'" + s + "' is not a number in " + range;
        return {};
      },
      "in " + range);
}

CLI::Validator one_of(std::initializer_list<int> allowed) {
  std::vector<int> values(allowed);
  std::string list;
  for (int v : values) list += (list.empty() ? "" : ", ") + std::to_string(v);
  return CLI::Validator(
      [values, list](std::string& s) -> std::string {
        char* end = nullptr;
        const long v = std::strtol(s.c_str(), &end, 10);
        if (s.empty() || end != s.c_str() + s.size() || std::find(values.begin(), values.end(), v) == values.end())
          return "'" + s + "' is not one of " + list;
        return {};
      },
      "one of " + list);
}

}  // namespace graft::cli

#include "cli/option_checks.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

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

}  // namespace graft::cli

#include "cli/option_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
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

// Edit distance between two option names (insertions, deletions, substitutions).
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

// After CLI11's "The following argument(s) were not expected: --tmp ...": for each unknown option,
// the command's nearest option names ("--tmp: did you mean --temp?"), within a third of its length.
void suggest_options(CLI::App& app, const CLI::ParseError& e) {
  const std::string what = e.what();
  const size_t colon = what.find(" expected: ");
  if (colon == std::string::npos) return;
  std::vector<std::string> names;
  for (CLI::App* sub : app.get_subcommands())
    for (const CLI::Option* o : sub->get_options()) {
      for (const auto& l : o->get_lnames()) names.push_back("--" + l);
      for (const auto& sn : o->get_snames()) names.push_back("-" + sn);
    }
  std::istringstream args(what.substr(colon + 11));
  for (std::string arg; args >> arg;) {
    if (arg.size() < 3 || arg[0] != '-') continue;
    const std::string flag = arg.substr(0, arg.find('='));
    size_t best = flag.size() / 3 + 1;  // farther than this is no suggestion
    for (const auto& n : names) best = std::min(best, edit_distance(flag, n));
    std::vector<std::string> nearest;
    for (const auto& n : names)
      if (edit_distance(flag, n) == best && std::find(nearest.begin(), nearest.end(), n) == nearest.end())
        nearest.push_back(n);
    if (best > flag.size() / 3 || nearest.empty()) continue;
    std::string hint = nearest[0];
    for (size_t i = 1; i < nearest.size(); ++i) hint += " or " + nearest[i];
    std::fprintf(stderr, "%s: did you mean %s?\n", flag.c_str(), hint.c_str());
  }
}


CLI::Validator not_empty() {
  return CLI::Validator([](std::string& s) { return s.empty() ? std::string("must not be empty") : std::string(); },
                        "NON-EMPTY");
}

}  // namespace graft::cli

// Range checks for numeric command-line options, shown in --help and enforced by CLI11 before any
// command runs: a value outside the range (or NaN, or not a number) is a usage error (exit 2).
#pragma once
#include <CLI/CLI.hpp>

namespace graft::cli {

// A finite number in [lo, hi].
CLI::Validator number_in(double lo, double hi);

}  // namespace graft::cli

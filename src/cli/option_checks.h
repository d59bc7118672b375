// Checks of numeric command-line options, shown in --help and enforced by CLI11 before any command
// runs: a value outside the range or set (or NaN, or not a number) is a usage error (exit 2).
#pragma once
#include <CLI/CLI.hpp>

#include <initializer_list>

namespace graft::cli {

// A finite number in [lo, hi].
CLI::Validator number_in(double lo, double hi);
// One of a few whole numbers (bit widths, group sizes).
CLI::Validator one_of(std::initializer_list<int> allowed);

// A path or name that must not be empty (an empty --out would reach the filesystem as "").
CLI::Validator not_empty();

// After a usage error naming arguments that were not expected, prints the command's nearest option
// names for each ("--tmp: did you mean --temp?") to stderr.
void suggest_options(CLI::App& app, const CLI::ParseError& e);

}  // namespace graft::cli

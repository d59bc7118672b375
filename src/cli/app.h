// The graft command line: one CLI11 app with every subcommand and its runner. The executable
// (main.cpp) and the Python package's in-process commands (graft.fuse, graft.convert, ...) run the
// same app, so both take the same options and fail with the same errors.
#pragma once
#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <vector>

#include "cli/subcommands.h"
#include "graft/cli/commands.h"

namespace graft::cli {

class App {
 public:
  App();
  CLI::App& cli() { return app_; }
  // Parses a command line (without the program name), llama.cpp's -hf and -hff spellings
  // included (CLI11 takes single-dash names of one letter only). Throws CLI::ParseError.
  void parse(std::vector<std::string> args);
  // Runs the subcommand parsed last; its errors propagate (graft::Error and the rest).
  int run_parsed();
  // Parses `args` (without the program name) and runs them. A usage error throws kBadRequest with
  // CLI11's message ("graft fuse: --base is required"); --help prints the help and returns 0.
  int run(const std::vector<std::string>& args);

 private:
  CLI::App app_;
  std::map<CLI::App*, Runner> runners_;
};

}  // namespace graft::cli

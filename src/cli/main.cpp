// graft: command-line entry point. Every failure becomes one message on stderr and an exit code
// chosen by the error's kind (README "Exit codes"); no exception escapes and nothing aborts.
#include <csignal>
#include <cstdio>
#include <exception>
#include <string>

#include "cli/app.h"
#include "cli/option_checks.h"
#include "graft/core/error.h"
#include "graft/core/interrupt.h"

namespace {

// Exit codes, one per ErrorKind (documented in README.md; scripts may rely on them).
int exit_code(graft::ErrorKind kind) {
  switch (kind) {
    case graft::ErrorKind::kBadInput: return 1;     // a model, config, tokenizer or adapter file is wrong
    case graft::ErrorKind::kBadRequest: return 2;   // a command-line argument is wrong (as for usage errors)
    case graft::ErrorKind::kUnsupported: return 3;  // well-formed but not implemented
    case graft::ErrorKind::kLimit: return 4;        // a resource budget or the memory ran out
    case graft::ErrorKind::kIo: return 5;           // the operating system refused (open, write, disk full)
    case graft::ErrorKind::kInternal: return 6;     // a bug: please report it
  }
  return 6;
}

int report(graft::ErrorKind kind, const char* what_full) {
  std::fflush(stdout);
  // Messages quote values from the input; a hostile file could make one megabytes long. Keep the
  // head, which names the file and field, and say how much was cut.
  constexpr size_t kMaxMessage = 16 * 1024;
  std::string bounded = what_full;
  if (bounded.size() > kMaxMessage)
    bounded = bounded.substr(0, kMaxMessage) + "... (" + std::to_string(bounded.size() - kMaxMessage) + " more bytes)";
  const char* what = bounded.c_str();
  // A command stopped by SIGINT/SIGTERM has cleaned up; exit as the signal would have.
  if (const int sig = graft::interrupt_signal()) {
    std::fprintf(stderr, "error: %s\n", what);
    return 128 + sig;
  }
  std::fprintf(stderr, "error: %s%s\n", kind == graft::ErrorKind::kInternal ? "internal error: " : "", what);
  return exit_code(kind);
}

}  // namespace

int main(int argc, char** argv) {
  // Past a file size limit (ulimit -f), write() then fails with EFBIG and the command reports it,
  // instead of the process dying with SIGXFSZ and leaving a partial file.
  std::signal(SIGXFSZ, SIG_IGN);
  graft::cli::App graft_app;
  CLI::App& app = graft_app.cli();
  try {
    graft_app.parse(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help/version (rc 0) or the usage error
    if (rc != 0) graft::cli::suggest_options(app, e);
    return rc == 0 ? 0 : exit_code(graft::ErrorKind::kBadRequest);
  }
  using graft::ErrorKind;
  try {
    return graft_app.run_parsed();
  } catch (const std::exception& e) {
    const graft::cli::Failure f = graft::cli::failure_of(e);
    return report(f.kind, f.message.c_str());
  } catch (...) {
    return report(ErrorKind::kInternal, "unknown exception");
  }
  return exit_code(ErrorKind::kInternal);
}

// graft: command-line entry point. Every failure becomes one message on stderr and an exit code
// chosen by the error's kind (README "Exit codes"); no exception escapes and nothing aborts.
#include <csignal>
#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <new>
#include <stdexcept>
#include <system_error>

#include "cli/commands.h"
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
  CLI::App app{"graft: a CPU inference engine for Llama-family models with LoRA-family adapters done right"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "graft 0.1.0");
  app.footer(
      "Exit codes: 0 success, 1 bad input file, 2 bad argument, 3 unsupported, 4 resource limit, 5 I/O failure, "
      "6 internal error.");
  std::map<CLI::App*, graft::cli::Runner> runners;
  auto* serve = app.add_subcommand("serve", "Serve the model over HTTP (llama-server compatible, live LoRA scales)");
  runners[serve] = graft::cli::add_serve_command(*serve);
  auto* chat = app.add_subcommand("chat", "Chat with the model in the terminal (history, streaming, live adapter scales)");
  runners[chat] = graft::cli::add_chat_command(*chat);
  auto* gen = app.add_subcommand("generate", "Generate text from a prompt, streaming it to stdout");
  runners[gen] = graft::cli::add_generate_command(*gen);
  auto* ppl = app.add_subcommand("perplexity", "Score a model on a text: perplexity, and KL divergence against a saved reference");
  runners[ppl] = graft::cli::add_perplexity_command(*ppl);
  auto* inspect = app.add_subcommand("inspect", "Show what an adapter contains and, with --base, what it changes");
  runners[inspect] = graft::cli::add_inspect_command(*inspect);
  auto* fuse = app.add_subcommand("fuse", "Merge adapters into a base checkpoint and write a safetensors checkpoint");
  runners[fuse] = graft::cli::add_fuse_command(*fuse);
  auto* convert = app.add_subcommand("convert", "Write an adapter as a llama.cpp GGUF LoRA file for a Llama-family base");
  runners[convert] = graft::cli::add_convert_command(*convert);
  auto* quantize = app.add_subcommand("quantize", "Write an mlx-lm affine-quantized (4/8-bit) copy of a Hugging Face model");
  runners[quantize] = graft::cli::add_quantize_command(*quantize);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help/version (rc 0) or the usage error
    if (rc != 0) graft::cli::suggest_options(app, e);
    return rc == 0 ? 0 : exit_code(graft::ErrorKind::kBadRequest);
  }
  using graft::ErrorKind;
  try {
    for (auto* sub : app.get_subcommands())
      if (runners.count(sub)) return runners[sub]();
  } catch (const graft::Error& e) {
    return report(e.kind(), e.what());
  } catch (const std::bad_alloc&) {
    return report(ErrorKind::kLimit, "out of memory");
  } catch (const std::length_error& e) {
    return report(ErrorKind::kLimit, (std::string("a size limit was exceeded (") + e.what() + ")").c_str());
  } catch (const std::system_error& e) {
    return report(ErrorKind::kIo, e.what());
  } catch (const std::exception& e) {
    return report(ErrorKind::kInternal, e.what());
  } catch (...) {
    return report(ErrorKind::kInternal, "unknown exception");
  }
  return exit_code(ErrorKind::kInternal);
}

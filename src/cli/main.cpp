// graft: command-line entry point. Library errors (graft::Error) become one message on stderr and
// exit code 1; nothing aborts.
#include <cstdio>
#include <exception>
#include <map>

#include "cli/commands.h"
#include "graft/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"graft: a CPU inference engine for Llama-family models with LoRA-family adapters done right"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "graft 0.1.0");
  std::map<CLI::App*, graft::cli::Runner> runners;
  auto* serve = app.add_subcommand("serve", "Serve the model over HTTP (llama-server compatible, live LoRA scales)");
  runners[serve] = graft::cli::add_serve_command(*serve);
  auto* gen = app.add_subcommand("generate", "Generate text from a prompt, streaming it to stdout");
  runners[gen] = graft::cli::add_generate_command(*gen);
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
    return app.exit(e);
  }
  try {
    for (auto* sub : app.get_subcommands())
      if (runners.count(sub)) return runners[sub]();
  } catch (const graft::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 1;
}

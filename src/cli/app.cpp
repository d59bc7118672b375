#include "cli/app.h"

#include <algorithm>
#include <new>
#include <stdexcept>
#include <system_error>

#include "graft/core/error.h"
#include "graft/core/version.h"

namespace graft::cli {

App::App() : app_("graft: a CPU inference engine for Llama-family models with LoRA-family adapters done right", "graft") {
  app_.require_subcommand(1);
  app_.set_version_flag("--version", std::string("graft ") + kVersion);
  app_.footer(
      "Exit codes: 0 success, 1 bad input file, 2 bad argument, 3 unsupported, 4 resource limit, 5 I/O failure, "
      "6 internal error.");
  const auto add = [&](const char* name, const char* help, Runner (*add_command)(CLI::App&)) {
    auto* sub = app_.add_subcommand(name, help);
    runners_[sub] = add_command(*sub);
  };
  add("serve", "Serve the model over HTTP (llama-server compatible, live LoRA scales)", add_serve_command);
  add("chat", "Chat with the model in the terminal (history, streaming, live adapter scales)", add_chat_command);
  add("generate", "Generate text from a prompt, streaming it to stdout", add_generate_command);
  add("perplexity", "Score a model on a text: perplexity, and KL divergence against a saved reference",
      add_perplexity_command);
  add("inspect", "Show what an adapter contains and, with --base, what it changes", add_inspect_command);
  add("fuse", "Merge adapters into a base checkpoint and write a safetensors checkpoint", add_fuse_command);
  add("convert", "Write an adapter as a llama.cpp GGUF LoRA file for a Llama-family base", add_convert_command);
  add("quantize", "Write an mlx-lm affine-quantized (4/8-bit) copy of a Hugging Face model", add_quantize_command);
}

Failure failure_of(const std::exception& e) {
  if (const auto* g = dynamic_cast<const Error*>(&e)) return {g->kind(), g->what()};
  if (dynamic_cast<const std::bad_alloc*>(&e)) return {ErrorKind::kLimit, "out of memory"};
  if (dynamic_cast<const std::length_error*>(&e))
    return {ErrorKind::kLimit, std::string("a size limit was exceeded (") + e.what() + ")"};
  if (dynamic_cast<const std::system_error*>(&e)) return {ErrorKind::kIo, e.what()};
  return {ErrorKind::kInternal, e.what()};
}

int App::run_parsed() {
  for (auto* sub : app_.get_subcommands())
    if (runners_.count(sub)) return runners_[sub]();
  fail_as(ErrorKind::kInternal, "no subcommand ran");
}

int run_command(const std::vector<std::string>& args) { return App().run(args); }

void App::parse(std::vector<std::string> args) {
  for (auto& a : args) {
    if (a == "-hf") a = "--hf-repo";
    if (a == "-hff") a = "--hf-file";
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  app_.parse(args);
}

int App::run(const std::vector<std::string>& args) {
  try {
    parse(args);
  } catch (const CLI::CallForHelp&) {
    std::printf("%s", app_.help().c_str());
    return 0;
  } catch (const CLI::ParseError& e) {
    std::string where = "graft";
    for (auto* sub : app_.get_subcommands()) where += " " + sub->get_name();
    fail_as(ErrorKind::kBadRequest, where, ": ", e.what());
  }
  return run_parsed();
}

}  // namespace graft::cli

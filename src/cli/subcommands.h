// The graft subcommands: each registers its options on the CLI11 app and returns its runner.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace graft::cli {

using Runner = std::function<int()>;

Runner add_generate_command(CLI::App& app);
Runner add_inspect_command(CLI::App& app);
Runner add_fuse_command(CLI::App& app);
Runner add_quantize_command(CLI::App& app);
Runner add_serve_command(CLI::App& app);
Runner add_convert_command(CLI::App& app);
Runner add_perplexity_command(CLI::App& app);
Runner add_chat_command(CLI::App& app);

}  // namespace graft::cli

// graft generate: load a model, build the prompt (plain or through the model's chat template),
// stream the continuation to stdout, print speeds to stderr. It is a one-sequence client of the
// engine that `graft serve` runs: the same sequence, sampler, stop rules and batching step.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/subcommands.h"
#include "cli/model_args.h"
#include "cli/option_checks.h"
#include "graft/core/error.h"
#include "graft/engine/generate.h"
#include "graft/io/json_file.h"
#include "graft/runtime/kernels.h"
#include "graft/text/chat_prompt.h"

namespace graft::cli {

namespace {

struct GenerateArgs {
  ModelArgs model;
  std::string prompt, prompt_file, system;
  bool chat = false;
  int64_t max_tokens = 256;
  runtime::SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  AdapterOptions adapters;
};

// Regular files only (a FIFO would block), at most 64 MiB.
std::string read_file(const std::string& path) { return io::read_regular_file(path, uint64_t{64} << 20, "prompt file"); }

int run_generate(GenerateArgs& a) {
  if (a.prompt.empty() == a.prompt_file.empty())
    fail_as(ErrorKind::kBadRequest, "give exactly one of --prompt and --prompt-file");
  if (!a.system.empty() && !a.chat) fail_as(ErrorKind::kBadRequest, "--system needs --chat");
  runtime::validate(a.sampling);
  const std::string user_text = a.prompt_file.empty() ? a.prompt : read_file(a.prompt_file);
  // Every adapter argument and file is checked before the model is read.
  engine::EngineOptions o = engine_options(a.model);
  apply_adapter_options(a.adapters, o);
  engine::Engine e(o);
  const model::LoadedModel& m = e.model();
  report_run(e, o);
  const text::Tokenizer& tok = e.tokenizer();

  std::vector<int32_t> prompt;
  if (a.chat) {
    if (!m.chat_template) fail_as(ErrorKind::kBadRequest, "model '", a.model.model, "' has no chat template; drop --chat to use a plain prompt");
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
    messages.push_back({{"role", "user"}, {"content", user_text}});
    prompt = text::ChatPrompt(tok, *m.chat_template, m.chat_template_origin).encode(messages);
  } else {
    prompt = tok.encode(user_text, /*parse_special=*/false);
  }

  const int64_t ctx = context_size(a.model, m.config, 4096);
  runtime::KVCache cache(m.config, ctx, cache_type(a.model));
  std::fprintf(stderr, "kv cache: %s, %lld bytes per token, context %lld tokens\n",
               std::string(runtime::kv_cache_type_name(cache.dtype())).c_str(),
               static_cast<long long>(cache.bytes_per_position()), static_cast<long long>(ctx));
  engine::GenerateOptions g;
  g.max_tokens = a.max_tokens;
  g.sampling = a.sampling;
  g.stop = a.stop;
  engine::Selection chosen = e.adapters().select(std::nullopt, std::nullopt);  // the --lora adapters at their scales
  e.adapters().make_resident(chosen);
  g.adapters = chosen.adapters();
  if (!a.ignore_eos) g.eos_ids = m.config.eos_token_ids;

  engine::GenerateResult r =
      engine::generate(e.pool(), e.transformer(), tok, cache, prompt, g, print_piece);
  std::printf("\n");
  std::fflush(stdout);
  const double pp = r.prompt_seconds > 0 ? r.prompt_tokens / r.prompt_seconds : 0;
  const double tg = r.decode_seconds > 0 ? r.tokens.size() / r.decode_seconds : 0;
  // Bytes of weight matrices one decode step streams (the bandwidth ceiling's numerator): in a
  // mixture-of-experts layer the router and num_experts_per_tok experts, not all of them.
  int64_t step_bytes = m.weights.lm_head.nbytes();
  for (const auto& L : m.weights.layers) step_bytes += L.bytes_per_token(m.config.num_experts_per_tok);
  // Unfused adapters in use add their factors (of the expert terms, the chosen experts' share).
  int64_t adapter_bytes = 0;
  for (const runtime::ScaledAdapter& a : g.adapters)
    adapter_bytes += a.adapter->bytes_per_token(m.config.num_experts_per_tok, m.config.num_experts);
  std::fprintf(stderr,
               "prompt: %lld tokens, %.1f tokens/s | generated: %zu tokens, %.1f tokens/s | stop: %s | threads: %d | "
               "weights read per token: %.1f MB",
               static_cast<long long>(r.prompt_tokens), pp, r.tokens.size(), tg, engine::stop_reason_name(r.reason),
               e.pool().size(), step_bytes / 1e6);
  if (adapter_bytes) std::fprintf(stderr, " + %.1f MB of unfused adapter factors", adapter_bytes / 1e6);
  std::fprintf(stderr, "\n");
  return 0;
}

}  // namespace

Runner add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  add_model_options(app, a->model);
  app.add_option("-p,--prompt", a->prompt, "Prompt text");
  app.add_option("-f,--prompt-file", a->prompt_file, "Read the prompt from this file");
  app.add_flag("--chat", a->chat, "Wrap the prompt as a user message in the model's chat template");
  app.add_option("--system", a->system, "System message (with --chat)");
  add_sampling_options(app, a->sampling, a->max_tokens);
  app.add_option("--stop", a->stop, "Stop when this string appears (repeatable; not printed)");
  app.add_flag("--ignore-eos", a->ignore_eos, "Do not stop at the end-of-sequence token");
  add_adapter_options(app, a->adapters);
  app.footer(
      "Text streams to stdout; prompt and decode speeds go to stderr.\n"
      "Example: graft generate -m models/SmolLM2-135M-Instruct.Q4_1.gguf --chat -p \"What is LoRA?\" --temp 0");
  return [a] { return run_generate(*a); };
}

}  // namespace graft::cli

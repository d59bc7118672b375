// graft generate: load a model, build the prompt (plain or through the model's chat template),
// stream the continuation to stdout, print speeds to stderr.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/adapter_args.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "graft/core/error.h"
#include "graft/model/loader.h"
#include "graft/runtime/generator.h"
#include "graft/text/chat_template.h"

namespace graft::cli {

namespace {

struct GenerateArgs {
  std::string model, prompt, prompt_file, system;
  bool chat = false;
  int64_t max_tokens = 256;
  int64_t ctx_size = 0;
  int threads = 0;
  runtime::SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  std::string dtype;
  std::vector<std::string> adapters, adapters_scaled, loras, loras_scaled;
  std::string merge_policy = "DeltaF32";
  bool fuse_requantize = false;
  bool no_mmap = false;
  int q_bits = 0;
  int q_group_size = 64;
};

std::vector<AdapterArg> adapter_args(const std::vector<std::string>& plain, const char* plain_opt,
                                     const std::vector<std::string>& scaled, const char* scaled_opt) {
  std::vector<AdapterArg> out;
  for (const auto& p : split_adapter_list(plain, plain_opt)) out.push_back({p, 1.0f});
  for (const auto& p : split_adapter_list(scaled, scaled_opt)) out.push_back(parse_scaled_adapter_arg(p));
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read prompt file '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int run_generate(const GenerateArgs& a) {
  if (a.prompt.empty() == a.prompt_file.empty()) fail("give exactly one of --prompt and --prompt-file");
  runtime::validate(a.sampling);
  const std::string user_text = a.prompt_file.empty() ? a.prompt : read_file(a.prompt_file);
  // Every adapter argument and file is checked before the model is read.
  const auto fused_args = adapter_args(a.adapters, "--adapter", a.adapters_scaled, "--adapter-scaled");
  const auto lora_args = adapter_args(a.loras, "--lora", a.loras_scaled, "--lora-scaled");
  const adapter::MergePolicy policy = adapter::parse_merge_policy(a.merge_policy);
  const auto fused = read_adapters(fused_args);
  const auto unfused = read_adapters(lora_args);
  runtime::ThreadPool pool(a.threads);

  model::LoadedModel m = [&] {
    ProgressBar bar("loading");
    model::LoadOptions opts;
    opts.progress = [&](int64_t d, int64_t t) { bar.update(d, t); };
    opts.weight_dtype = parse_float_dtype(a.dtype);
    if (a.q_bits != 0) {
      check_affine_params(a.q_bits, a.q_group_size, a.q_group_size, "--q-bits/--q-group-size");
      opts.quantize = model::QuantSpec{a.q_bits, a.q_group_size};
    }
    opts.copy_weights = a.no_mmap;
    opts.fused_adapters = fused;
    opts.merge_policy = policy;
    opts.fuse_requantize = a.fuse_requantize;
    opts.parallel = [&pool](int64_t n, const std::function<void(int64_t, int64_t)>& fn) { pool.parallel_for(n, fn, 16); };
    return model::load_model(a.model, opts);
  }();
  if (m.fused) {
    std::fprintf(stderr, "fused %zu adapter(s) into %zu tensor(s) with %s\n", fused.size(), m.fused->updates.size(),
                 adapter::policy_name(policy));
    if (a.fuse_requantize && m.quantized)
      std::fprintf(stderr,
                   "warning: --fuse-requantize: adapted weights were dequantized, merged and quantized again; "
                   "deltas smaller than a quantization step are lost (apply the adapter with --lora to keep them)\n");
  }
  std::shared_ptr<const runtime::LoraSet> loras;
  std::vector<float> lora_scales;
  if (!unfused.empty()) {
    loras = runtime::make_lora_set(m.config, *m.source, unfused);
    int64_t terms = 0;
    for (const auto& ad : loras->adapters) terms += ad->term_count;
    for (const auto& u : unfused) lora_scales.push_back(u.strength);
    std::fprintf(stderr, "unfused: %zu adapter(s), %lld low-rank term(s)\n", unfused.size(), static_cast<long long>(terms));
  }
  const text::Tokenizer& tok = m.tokenizer;

  std::vector<int32_t> prompt;
  if (a.chat) {
    if (!m.chat_template) fail("model '", a.model, "' has no chat template; drop --chat to use a plain prompt");
    std::vector<text::ChatMessage> messages;
    if (!a.system.empty()) messages.push_back({"system", a.system});
    messages.push_back({"user", user_text});
    text::ChatTemplateOptions topt;
    topt.add_generation_prompt = true;
    if (auto b = tok.bos_id()) topt.bos_token = tok.token_text(*b);
    if (auto e = tok.eos_id()) topt.eos_token = tok.token_text(*e);
    const std::string rendered = text::ChatTemplate(*m.chat_template).render(messages, topt);
    // The template writes any BOS itself, as transformers' apply_chat_template assumes.
    prompt = tok.encode(rendered, /*parse_special=*/true, /*add_bos=*/false);
  } else {
    if (!a.system.empty()) fail("--system needs --chat");
    prompt = tok.encode(user_text, /*parse_special=*/false);
  }

  const int64_t ctx = a.ctx_size > 0 ? a.ctx_size : std::min<int64_t>(4096, m.config.max_position_embeddings);
  runtime::Transformer transformer(m.config, m.weights, loras);
  runtime::KVCache cache(m.config, ctx);
  runtime::GenerateOptions g;
  g.max_tokens = a.max_tokens;
  g.sampling = a.sampling;
  g.stop = a.stop;
  g.lora_scales = lora_scales;
  if (!a.ignore_eos) g.eos_ids = m.config.eos_token_ids;

  runtime::GenerateResult r = runtime::generate(pool, transformer, tok, cache, prompt, g, [](std::string_view s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::printf("\n");
  std::fflush(stdout);
  const double pp = r.prompt_seconds > 0 ? r.prompt_tokens / r.prompt_seconds : 0;
  const double tg = r.decode_seconds > 0 ? r.tokens.size() / r.decode_seconds : 0;
  // Bytes of weight matrices one decode step streams (the bandwidth ceiling's numerator).
  int64_t step_bytes = m.weights.lm_head.nbytes();
  for (const auto& L : m.weights.layers)
    for (const model::Matrix* t : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) step_bytes += t->nbytes();
  std::fprintf(stderr,
               "prompt: %lld tokens, %.1f tokens/s | generated: %zu tokens, %.1f tokens/s | stop: %s | threads: %d | "
               "weights read per token: %.1f MB\n",
               static_cast<long long>(r.prompt_tokens), pp, r.tokens.size(), tg, runtime::stop_reason_name(r.reason),
               pool.size(), step_bytes / 1e6);
  return 0;
}

}  // namespace

Runner add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  app.add_option("-m,--model", a->model, "Model: a Hugging Face directory (config.json, *.safetensors, tokenizer.json) or a .gguf file")
      ->required();
  app.add_option("-p,--prompt", a->prompt, "Prompt text");
  app.add_option("-f,--prompt-file", a->prompt_file, "Read the prompt from this file");
  app.add_flag("--chat", a->chat, "Wrap the prompt as a user message in the model's chat template");
  app.add_option("--system", a->system, "System message (with --chat)");
  app.add_option("-n,--max-tokens", a->max_tokens, "Maximum tokens to generate (-1: until EOS or the context is full)")
      ->capture_default_str();
  app.add_option("--temp", a->sampling.temperature, "Sampling temperature; 0 = greedy")->capture_default_str();
  app.add_option("--top-k", a->sampling.top_k, "Keep the K most likely tokens (0 = off)")->capture_default_str();
  app.add_option("--top-p", a->sampling.top_p, "Nucleus sampling: keep tokens up to this cumulative probability (1 = off)")
      ->capture_default_str();
  app.add_option("--min-p", a->sampling.min_p, "Drop tokens less likely than min-p x the top token (0 = off)")
      ->capture_default_str();
  app.add_option("--repeat-penalty", a->sampling.repeat_penalty, "Penalize tokens seen in the last --repeat-last-n (1 = off)")
      ->capture_default_str();
  app.add_option("--repeat-last-n", a->sampling.repeat_last_n, "Window for --repeat-penalty")->capture_default_str();
  app.add_option("-s,--seed", a->sampling.seed, "Random seed for reproducible sampling")->capture_default_str();
  app.add_option("--stop", a->stop, "Stop when this string appears (repeatable; not printed)");
  app.add_flag("--ignore-eos", a->ignore_eos, "Do not stop at the end-of-sequence token");
  app.add_option("--dtype", a->dtype,
                 "Convert weight matrices at load: F32 | F16 | BF16 (default: as stored; GGUF block types become F32)");
  app.add_option("--adapter", a->adapters,
                 "Adapter(s) to fuse into the weights at load: DIR[,DIR...] (PEFT, mlx-lm, kohya/ComfyUI, LyCORIS; "
                 "repeatable; adapters stack)");
  app.add_option("--adapter-scaled", a->adapters_scaled, "Fused adapter(s) with a strength: DIR:SCALE[,DIR:SCALE...]");
  app.add_option("--merge-policy", a->merge_policy, "Fusing arithmetic: DeltaF32 | RankWiseF32 | RoundedBF16Delta")
      ->capture_default_str();
  app.add_flag("--fuse-requantize", a->fuse_requantize,
               "Allow fusing into an mlx-lm quantized checkpoint: dequantize, merge, quantize again (loses deltas "
               "smaller than a quantization step; --lora keeps them)");
  app.add_flag("--no-mmap", a->no_mmap,
               "Copy the weights into process memory instead of streaming them from the file mapping (faster "
               "decode: huge pages; the mapping's pages are released as each matrix is copied)");
  app.add_option("--q-bits", a->q_bits,
                 "Quantize dense weights at load to 4 or 8 bits (mlx affine, as graft quantize; fused adapters are "
                 "merged first)");
  app.add_option("--q-group-size", a->q_group_size, "Group size for --q-bits: 32 | 64 | 128")->capture_default_str();
  app.add_option("--lora", a->loras,
                 "Adapter(s) kept unfused as low-rank terms with a live scale: DIR[,DIR...] (works on quantized bases)");
  app.add_option("--lora-scaled", a->loras_scaled, "Unfused adapter(s) with a scale: DIR:SCALE[,DIR:SCALE...]");
  app.add_option("-t,--threads", a->threads, "Worker threads (0 = all cores)")->capture_default_str();
  app.add_option("-c,--ctx-size", a->ctx_size, "Context size in tokens (0 = min(4096, the model's maximum))")
      ->capture_default_str();
  app.footer(
      "Text streams to stdout; prompt and decode speeds go to stderr.\n"
      "Example: graft generate -m models/SmolLM2-135M-Instruct.Q4_1.gguf --chat -p \"What is LoRA?\" --temp 0");
  return [a] { return run_generate(*a); };
}

}  // namespace graft::cli

// graft perplexity: llama-perplexity's job on graft's engine. Perplexity of a text file in chunks
// of --ctx-size tokens, and with --kl-divergence the KL divergence, top-token agreement and Δp
// against a base's saved log-probabilities (written by a first run with --kl-divergence-base, by
// graft or llama-perplexity: one file format). Results go to stdout, progress to stderr.
#include <chrono>
#include <cstdio>
#include <memory>

#include "cli/subcommands.h"
#include "cli/model_args.h"
#include "cli/option_checks.h"
#include "graft/core/error.h"
#include "graft/engine/perplexity.h"
#include "graft/io/json_file.h"
#include "graft/runtime/kernels.h"

namespace graft::cli {

namespace {

struct PerplexityArgs {
  ModelArgs model;
  AdapterOptions adapters;
  std::string text_file, base_file;
  bool kl_divergence = false, json = false;
  int64_t chunks = -1;
};

using Clock = std::chrono::steady_clock;

nlohmann::ordered_json estimate_json(const engine::Estimate& e) { return {{"value", e.value}, {"error", e.error}}; }

nlohmann::ordered_json percentiles_json(const std::vector<engine::Percentile>& ps) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& p : ps) {
    char key[16];
    std::snprintf(key, sizeof key, "%g", p.fraction * 100);  // "100", "99.9", "50", "0.1", "0"
    j[key] = p.value;
  }
  return j;
}

void print_json(const engine::PerplexitySummary& s, int64_t chunks, int64_t n_ctx) {
  nlohmann::ordered_json j{{"chunks", chunks}, {"ctx_size", n_ctx}, {"scored_tokens", s.count},
                           {"ppl", estimate_json(s.ppl)}};
  if (s.has_base) {
    j["ppl_base"] = estimate_json(s.ppl_base);
    j["log_ppl_ratio"] = estimate_json(s.log_ppl_ratio);
    j["ppl_ratio"] = estimate_json(s.ppl_ratio);
    j["ppl_diff"] = estimate_json(s.ppl_diff);
    j["log_ppl_correlation"] = s.log_ppl_correlation;
    j["kld"] = estimate_json(s.kld);
    j["kld_percentiles"] = percentiles_json(s.kld_percentiles);
    j["p_diff"] = estimate_json(s.p_diff);
    j["p_diff_rms"] = estimate_json(s.p_diff_rms);
    j["p_diff_percentiles"] = percentiles_json(s.p_diff_percentiles);
    j["same_top"] = estimate_json(s.same_top);
  }
  std::printf("%s\n", j.dump(2).c_str());
}

// "99.9%", "Median", "Maximum": llama-perplexity's row labels.
std::string percentile_label(double f) {
  if (f == 1) return "Maximum";
  if (f == 0) return "Minimum";
  if (f == 0.5) return "Median ";
  char b[16];
  std::snprintf(b, sizeof b, "%4.1f%%  ", f * 100);
  return b;
}

void print_text(const engine::PerplexitySummary& s) {
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", s.ppl.value, s.ppl.error);
  if (!s.has_base) return;
  std::printf("\n====== Perplexity statistics ======\n");
  std::printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", s.ppl.value, s.ppl.error);
  std::printf("Mean PPL(base)                : %10.6f ± %10.6f\n", s.ppl_base.value, s.ppl_base.error);
  std::printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100 * s.log_ppl_correlation);
  std::printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", s.log_ppl_ratio.value, s.log_ppl_ratio.error);
  std::printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", s.ppl_ratio.value, s.ppl_ratio.error);
  std::printf("Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n", s.ppl_diff.value, s.ppl_diff.error);
  std::printf("\n====== KL divergence statistics ======\n");
  std::printf("Mean    KLD: %10.6f ± %10.6f\n", s.kld.value, s.kld.error);
  for (const auto& p : s.kld_percentiles) std::printf("%s KLD: %10.6f\n", percentile_label(p.fraction).c_str(), p.value);
  std::printf("\n====== Token probability statistics ======\n");
  std::printf("Mean    Δp: %6.3f ± %5.3f %%\n", 100 * s.p_diff.value, 100 * s.p_diff.error);
  for (const auto& p : s.p_diff_percentiles)
    std::printf("%s Δp: %6.3f%%\n", percentile_label(p.fraction).c_str(), 100 * p.value);
  std::printf("RMS Δp    : %6.3f ± %5.3f %%\n", 100 * s.p_diff_rms.value, 100 * s.p_diff_rms.error);
  std::printf("Same top p: %6.3f ± %5.3f %%\n", 100 * s.same_top.value, 100 * s.same_top.error);
}

// The token stream and its chunking: the text's tokens, or the base file's.
std::vector<int32_t> stream_tokens(const PerplexityArgs& a, const engine::Engine& e, const io::LogProbFile* base) {
  if (base) {
    const auto t = base->tokens();
    const int32_t vocab = static_cast<int32_t>(e.model().config.vocab_size);
    for (size_t i = 0; i < t.size(); ++i)
      if (t[i] < 0 || t[i] >= vocab)
        fail("'", base->path(), "': token ", i, " is ", t[i], ", outside the model's vocabulary of ", vocab);
    return {t.begin(), t.end()};
  }
  const std::string text = io::read_regular_file(a.text_file, uint64_t{1} << 30, "text file");
  return e.tokenizer().encode(text, /*parse_special=*/false);
}

int64_t chunk_size(const PerplexityArgs& a, const engine::Engine& e, const io::LogProbFile* base) {
  const int64_t max_ctx = e.model().config.max_position_embeddings;
  if (base) {
    const io::LogProbLayout& l = base->layout();
    if (a.model.ctx_size != 0 && a.model.ctx_size != l.n_ctx)
      fail_as(ErrorKind::kBadRequest, "--ctx-size ", a.model.ctx_size, " differs from the ", l.n_ctx,
              " tokens per chunk of '", base->path(), "' (drop --ctx-size: the base file decides)");
    if (l.n_vocab != e.model().config.vocab_size)
      fail("'", base->path(), "': saved for a vocabulary of ", l.n_vocab, " tokens; this model has ",
           e.model().config.vocab_size, " (a base file is for models sharing one tokenizer)");
    if (l.n_ctx > max_ctx) fail("'", base->path(), "': chunks of ", l.n_ctx, " tokens exceed the model's context of ", max_ctx);
    return l.n_ctx;
  }
  return context_size(a.model, e.model().config, 512);
}

int run_perplexity(PerplexityArgs& a) {
  if (a.kl_divergence == !a.text_file.empty())
    fail_as(ErrorKind::kBadRequest,
            a.kl_divergence ? "--kl-divergence scores the tokens saved in the base file; drop -f/--file"
                            : "give -f/--file (the text to score) or --kl-divergence with --kl-divergence-base");
  if (a.kl_divergence && a.base_file.empty())
    fail_as(ErrorKind::kBadRequest, "--kl-divergence needs --kl-divergence-base FILE (saved by a run without --kl-divergence)");
  std::unique_ptr<io::LogProbFile> base;
  if (a.kl_divergence) base = std::make_unique<io::LogProbFile>(a.base_file);  // checked before the model loads
  engine::EngineOptions o = engine_options(a.model);
  apply_adapter_options(a.adapters, o);
  engine::Engine e(o);
  report_run(e, o);
  const int64_t n_ctx = chunk_size(a, e, base.get());
  const std::vector<int32_t> tokens = stream_tokens(a, e, base.get());
  const int64_t available = static_cast<int64_t>(tokens.size()) / n_ctx;
  if (available == 0)
    fail_as(ErrorKind::kBadRequest, "'", a.text_file, "' is ", tokens.size(), " tokens; one chunk needs ", n_ctx,
            " (give a longer text or a smaller --ctx-size)");
  const int64_t n_chunk = a.chunks > 0 ? std::min(a.chunks, available) : available;

  engine::Selection chosen = e.adapters().select(std::nullopt, std::nullopt);  // the --lora adapters at their scales
  e.adapters().make_resident(chosen);
  engine::PerplexityRun run(e, n_ctx, chosen.adapters(), cache_type(a.model));
  std::unique_ptr<io::LogProbWriter> save;
  if (!a.base_file.empty() && !a.kl_divergence)
    save = std::make_unique<io::LogProbWriter>(a.base_file, run.layout(n_chunk),
                                               std::span(tokens).first(static_cast<size_t>(n_chunk * n_ctx)));
  std::fprintf(stderr, "%lld chunks of %lld tokens, %lld scored per chunk\n", static_cast<long long>(n_chunk),
               static_cast<long long>(n_ctx), static_cast<long long>(run.layout(1).scored_per_chunk()));
  engine::PositionScores scores;
  const auto t0 = Clock::now();
  for (int64_t c = 0; c < n_chunk; ++c) {
    run.score_chunk(std::span(tokens).subspan(static_cast<size_t>(c * n_ctx), static_cast<size_t>(n_ctx)), scores,
                    base.get(), c, save.get());
    const engine::PerplexitySummary s = engine::summarize(scores, /*percentiles=*/false);  // (no sort per chunk)
    std::fprintf(stderr, "[%lld/%lld] PPL %.4f", static_cast<long long>(c + 1), static_cast<long long>(n_chunk), s.ppl.value);
    if (s.has_base) std::fprintf(stderr, "  KLD %.6f  same top %.2f %%", s.kld.value, 100 * s.same_top.value);
    const double spent = std::chrono::duration<double>(Clock::now() - t0).count();
    std::fprintf(stderr, "  (%.1f s, %.0f s left)\n", spent, spent / static_cast<double>(c + 1) * static_cast<double>(n_chunk - c - 1));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  std::fprintf(stderr, "evaluated %lld tokens in %.1f s (%.1f tokens/s, threads: %d)\n",
               static_cast<long long>(n_chunk * (n_ctx - 1)), seconds, n_chunk * (n_ctx - 1) / seconds, e.pool().size());
  if (save) {
    save->commit();
    std::fprintf(stderr, "saved the log-probabilities to '%s' (%.1f MB)\n", a.base_file.c_str(),
                 run.layout(n_chunk).file_bytes() / 1e6);
  }
  const engine::PerplexitySummary s = engine::summarize(scores);
  if (a.json) print_json(s, n_chunk, n_ctx);
  else print_text(s);
  return 0;
}

}  // namespace

Runner add_perplexity_command(CLI::App& app) {
  auto a = std::make_shared<PerplexityArgs>();
  add_model_options(app, a->model,
                    "Tokens per chunk (0 = 512, or the base file's with --kl-divergence); the second half of each "
                    "chunk is scored");
  app.add_option("-f,--file", a->text_file, "The text to score (a regular file, read whole)");
  app.add_option("--chunks", a->chunks, "Score at most this many chunks (<= 0: every whole chunk)")
      ->check(number_in(-1, 1 << 30))
      ->capture_default_str();
  app.add_option("--kl-divergence-base", a->base_file,
                 "Without --kl-divergence: save this run's log-probabilities here (the reference). With it: read them "
                 "(llama-perplexity's file format: either engine's reference scores the other)");
  app.add_flag("--kl-divergence", a->kl_divergence,
               "Score the base file's tokens and compare with its log-probabilities: KL divergence, Δp, same top token");
  app.add_flag("--json", a->json, "Print the results as one JSON object instead of text");
  add_adapter_options(app, a->adapters);
  app.footer(
      "Example, the activation rounding's cost on the demo model:\n"
      "  graft perplexity -m models/SmolLM2-135M-Instruct.Q4_1.gguf -f text.txt --activations f32 "
      "--kl-divergence-base ref.bin\n"
      "  graft perplexity -m models/SmolLM2-135M-Instruct.Q4_1.gguf --kl-divergence-base ref.bin --kl-divergence");
  return [a] { return run_perplexity(*a); };
}

}  // namespace graft::cli

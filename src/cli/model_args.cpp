#include "cli/model_args.h"

#include <cstdio>

#include "cli/option_checks.h"
#include "cli/progress.h"
#include "graft/core/affine_quant.h"
#include "graft/core/error.h"
#include "graft/runtime/kernels.h"
#include "graft/runtime/kv_cache.h"

namespace graft::cli {

namespace {
// A CLI11 check from one of graft's name parsers (which throw on a name they do not know): "'x' is
// not <what> (allowed: a, b)"; CLI11 puts the option's name in front.
template <class Parse>
CLI::Validator named_value(Parse parse, const std::string& what, const std::vector<std::string>& allowed) {
  std::string list, desc;
  for (const auto& n : allowed) {
    list += (list.empty() ? "" : ", ") + n;
    desc += (desc.empty() ? "" : "|") + n;
  }
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        try {
          parse(s);
        } catch (const Error&) {
          return "'" + s + "' is not " + what + " (allowed: " + list + ")";
        }
        return {};
      },
      desc);
}
}  // namespace

void add_model_options(CLI::App& app, ModelArgs& a, const std::string& ctx_help) {
  app.add_option("-m,--model", a.model, "Model: a Hugging Face directory (config.json, *.safetensors, tokenizer.json) or a .gguf file");
  app.add_option("--hf-repo", a.hf_repo,
                 "(-hf) Model from the Hugging Face Hub instead of -m: ORG/NAME[:QUANT] (a GGUF repo: its file of that "
                 "quantization, default Q4_K_M; a safetensors repo: the snapshot), kept in the Hugging Face cache "
                 "(HF_HOME; HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE=1 are honoured)");
  app.add_option("--hf-file", a.hf_file, "(-hff) With -hf: this file of the repo");
  app.add_option("--revision", a.revision, "With -hf: a branch, tag or commit (default: main)");
  app.add_option("--dtype", a.dtype,
                 "Convert weight matrices at load: F32 | F16 | BF16 (default: as stored; GGUF block types become F32)");
  app.add_option("--merge-policy", a.merge_policy, "Fusing arithmetic: DeltaF32 | RankWiseF32 | RoundedBF16Delta")
      ->capture_default_str();
  app.add_flag("--fuse-dense", a.fuse_dense,
               "On a quantized base (GGUF blocks, mlx-lm), keep the matrices an --adapter is fused into in F32 (or "
               "--dtype): the adapter exactly, but those matrices read 4 bytes a weight at decode. Default: quantized "
               "again at 8 bits (Q8_0, or mlx 8-bit): a LoRA's change is far below a 4-bit step, so the base's own "
               "4-6 bits would round it away. --lora applies it exactly at the base's own speed");
  // The old opt-in to fusing into mlx-quantized bases, now always allowed: accepted so scripts keep working.
  app.add_flag("--fuse-requantize", a.fuse_requantize)->group("");
  app.add_flag("--no-mmap", a.no_mmap,
               "Copy the weights into process memory instead of streaming them from the file mapping (faster "
               "decode: huge pages; the mapping's pages are released as each matrix is copied)");
  app.add_option("--q-bits", a.q_bits,
                 "Quantize dense weights at load to 4 or 8 bits (mlx affine, as graft quantize; fused adapters are "
                 "merged first)")
      ->check(one_of({4, 8}));
  app.add_option("--q-group-size", a.q_group_size, "Group size for --q-bits: 32 | 64 | 128")
      ->check(one_of({32, 64, 128}))
      ->capture_default_str();
  app.add_option("-t,--threads", a.threads, "Threads for the prompt and generation (0 = all cores; loading uses every core)")
      ->check(number_in(0, 4096))
      ->capture_default_str();
  app.add_option("-c,--ctx-size", a.ctx_size, ctx_help)->check(number_in(0, 1 << 24))->capture_default_str();
  // One option for keys and values (llama.cpp has --cache-type-k/-v; graft stores both alike).
  app.add_option("--cache-type", a.cache_type,
                 "KV cache storage for keys and values: f32 | f16 | bf16 (16-bit: half the memory and attention "
                 "bandwidth; attention computes in F32 on the rounded keys and values)")
      ->check(named_value([](const std::string& s) { runtime::parse_kv_cache_type(s); }, "a KV cache type",
                          {"f32", "f16", "bf16"}))
      ->capture_default_str();
  app.add_option("--lora-dtype", a.lora_dtype,
                 "Factors of the unfused (--lora) adapters at run time: auto (as stored: exact) | f32 | bf16 | q8_0 "
                 "(8-bit blocks as llama.cpp's q8_0 LoRA: a quarter of the F32 bytes, the down-projection on the "
                 "integer kernels)")
      ->check(named_value([](const std::string& s) { runtime::parse_lora_dtype(s); }, "an adapter factor type",
                          {"auto", "f32", "bf16", "q8_0"}))
      ->capture_default_str();
  app.add_option("--activations", a.activations,
                 "How quantized weights (GGUF blocks, mlx affine) meet the activations: q8 (rounded to 8 bits, a "
                 "scale per 16 columns, the integer kernels: fast) | f32 (unrounded: F32 math on the dequantized weights, "
                 "the logits of transformers on a GGUF and of mlx-lm on an mlx model; slower)")
      ->check(named_value([](const std::string& s) { compute::parse_activations(s); }, "an activation type",
                          {"q8", "f32"}))
      ->capture_default_str();
}

int64_t context_size(const ModelArgs& a, const model::ModelConfig& config, int64_t dflt) {
  const int64_t max = config.max_position_embeddings;
  if (a.ctx_size > max)
    fail_as(ErrorKind::kBadRequest, "--ctx-size ", a.ctx_size, " exceeds the model's maximum context of ", max, " tokens");
  return a.ctx_size > 0 ? a.ctx_size : std::min(dflt, max);
}

bool print_piece(std::string_view piece) {
  std::fwrite(piece.data(), 1, piece.size(), stdout);
  std::fflush(stdout);
  return true;
}

DType cache_type(const ModelArgs& a) { return runtime::parse_kv_cache_type(a.cache_type); }

std::vector<AdapterArg> adapter_args(const std::vector<std::string>& plain, const char* plain_opt,
                                     const std::vector<std::string>& scaled, const char* scaled_opt) {
  std::vector<AdapterArg> out;
  for (const auto& p : split_adapter_list(plain, plain_opt)) out.push_back({p, 1.0f});
  for (const auto& p : split_adapter_list(scaled, scaled_opt)) out.push_back(parse_scaled_adapter_arg(p));
  return out;
}

void add_sampling_options(CLI::App& app, runtime::SamplingParams& s, int64_t& max_tokens) {
  app.add_option("-n,--max-tokens", max_tokens, "Maximum tokens to generate (-1: until EOS or the context is full)")
      ->check(number_in(-1, 1 << 30))
      ->capture_default_str();
  app.add_option("--temp", s.temperature, "Sampling temperature; 0 = greedy")
      ->check(number_in(0, 1e6))
      ->capture_default_str();
  app.add_option("--top-k", s.top_k, "Keep the K most likely tokens (0 = off)")
      ->check(number_in(0, 1 << 30))
      ->capture_default_str();
  app.add_option("--top-p", s.top_p, "Nucleus sampling: keep tokens up to this cumulative probability (1 = off)")
      ->capture_default_str();
  app.add_option("--min-p", s.min_p, "Drop tokens less likely than min-p x the top token (0 = off)")
      ->capture_default_str();
  app.add_option("--repeat-penalty", s.repeat_penalty, "Penalize tokens seen in the last --repeat-last-n (1 = off)")
      ->capture_default_str();
  app.add_option("--repeat-last-n", s.repeat_last_n, "Window for --repeat-penalty")
      ->check(number_in(0, 1 << 30))
      ->capture_default_str();
  app.add_option("-s,--seed", s.seed, "Random seed for reproducible sampling")->capture_default_str();
}

void add_adapter_options(CLI::App& app, AdapterOptions& a) {
  app.add_option("--adapter", a.adapters,
                 "Adapter(s) to fuse into the weights at load: DIR[,DIR...] (PEFT, mlx-lm, kohya/ComfyUI, LyCORIS; "
                 "repeatable; adapters stack)");
  app.add_option("--adapter-scaled", a.adapters_scaled, "Fused adapter(s) with a strength: DIR:SCALE[,DIR:SCALE...]");
  app.add_option("--lora", a.loras,
                 "Adapter(s) kept unfused (LoRA, DoRA, LoKr, LoHa terms) with a live scale: DIR[,DIR...] (works on quantized bases)");
  app.add_option("--lora-scaled", a.loras_scaled, "Unfused adapter(s) with a scale: DIR:SCALE[,DIR:SCALE...]");
}

void apply_adapter_options(const AdapterOptions& a, engine::EngineOptions& o) {
  o.load.fused_adapters = read_adapters(adapter_args(a.adapters, "--adapter", a.adapters_scaled, "--adapter-scaled"));
  const std::vector<AdapterArg> loras = adapter_args(a.loras, "--lora", a.loras_scaled, "--lora-scaled");
  o.adapters = read_adapters(loras);
  for (const auto& l : loras) o.adapter_names.push_back(default_adapter_name(l.path));
}

hub::Hub hub_from_environment() {
  hub::Hub h = hub::Hub::from_environment();
  auto bar = std::make_shared<std::unique_ptr<ProgressBar>>();
  auto label = std::make_shared<std::string>();
  h.progress = [bar, label](const std::string& what, int64_t done, int64_t total) {
    if (what != *label) {  // a bar per file
      *label = what;
      *bar = std::make_unique<ProgressBar>("downloading " + what);
    }
    (*bar)->update(done, total);
  };
  return h;
}

std::string local_model_path(const std::string& path_or_hf) {
  if (path_or_hf.rfind("hf:", 0) != 0) return path_or_hf;
  return hub::resolve_model(hub_from_environment(), path_or_hf.substr(3), "", "");
}

engine::EngineOptions engine_options(ModelArgs& a) {
  if (a.model.empty() == a.hf_repo.empty())
    fail_as(ErrorKind::kBadRequest, "give the model with exactly one of -m PATH and -hf ORG/NAME[:QUANT]");
  if (a.hf_repo.empty() && !(a.hf_file.empty() && a.revision.empty()))
    fail_as(ErrorKind::kBadRequest, "--hf-file and --revision go with -hf");
  if (a.ctx_size < 0) fail_as(ErrorKind::kBadRequest, "--ctx-size must be >= 0 (0: the default), got ", a.ctx_size);
  if (!a.hf_repo.empty()) a.model = hub::resolve_model(hub_from_environment(), a.hf_repo, a.hf_file, a.revision);
  engine::EngineOptions o;
  o.model = a.model;
  o.threads = a.threads;
  auto bar = std::make_shared<ProgressBar>("loading");
  o.load.progress = [bar](int64_t d, int64_t t) { bar->update(d, t); };
  o.load.weight_dtype = parse_float_dtype(a.dtype);
  if (a.q_bits != 0) {
    check_affine_params(a.q_bits, a.q_group_size, a.q_group_size, "--q-bits/--q-group-size");
    o.load.quantize = model::QuantSpec{a.q_bits, a.q_group_size};
  }
  o.load.copy_weights = a.no_mmap;
  o.load.merge_policy = adapter::parse_merge_policy(a.merge_policy);
  o.load.fuse_dense = a.fuse_dense;
  o.lora_dtype = runtime::parse_lora_dtype(a.lora_dtype);
  o.activations = compute::parse_activations(a.activations);
  return o;
}

void report_run(engine::Engine& e, const engine::EngineOptions& o) {
  const model::LoadedModel& m = e.model();
  if (m.fused) {
    std::string formats;
    for (const auto& [format, count] : m.fused_formats)
      formats += (formats.empty() ? "" : ", ") + format + " x" + std::to_string(count);
    // (Requantized matrices are the only ones held at 8 bits: model::LoadOptions::fuse_dense.)
    const bool requantized = m.fused_formats.count("Q8_0") || m.fused_formats.count("mlx 8-bit");
    std::fprintf(stderr, "fused %zu adapter(s) into %zu matrices with %s, held as %s%s\n", m.fused->adapters.size(),
                 m.fused->updates.size(), adapter::policy_name(o.load.merge_policy), formats.c_str(),
                 requantized ? " (a quantized base's matrices go to 8 bits: its own 4-6 bits would round the adapter "
                               "away; --lora keeps the base's bytes, exactly; --fuse-dense is exact in F32)"
                 : o.load.fuse_dense ? " (--fuse-dense)" : "");
  }
  std::fprintf(stderr, "activations: %s | %s\n", runtime::activations_in_force(m.weights, o.activations),
               runtime::describe_kernels(m.weights).c_str());
  if (e.adapters().fused() || e.adapters().size() == 0) return;
  int64_t terms = 0, bytes = 0;
  const std::vector<engine::AdapterInfo> unfused = e.adapters().list();
  for (const auto& a : unfused) {
    terms += a.terms;
    bytes += a.bytes;
  }
  std::fprintf(stderr, "unfused: %zu adapter(s), %lld term(s), factors %s (%.1f MB)\n", unfused.size(),
               static_cast<long long>(terms), runtime::lora_dtype_name(o.lora_dtype).c_str(), bytes / 1e6);
}

}  // namespace graft::cli

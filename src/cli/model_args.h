// The options every command that runs a model shares (generate, serve): one grammar, one place.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cli/adapter_args.h"
#include "graft/engine/engine.h"
#include "graft/hub/hub.h"

namespace graft::cli {

struct ModelArgs {
  std::string model;
  std::string hf_repo, hf_file, revision;  // -hf ORG/NAME[:QUANT], --hf-file, --revision: the model from the Hub
  std::string dtype;
  int q_bits = 0;
  int q_group_size = 64;
  bool no_mmap = false;
  std::string merge_policy = "DeltaF32";
  bool fuse_dense = false;
  bool fuse_requantize = false;  // the old name of the default (accepted, hidden)
  int threads = 0;
  int64_t ctx_size = 0;
  std::string cache_type = "f16";  // KV cache storage: f32 | f16 | bf16
  std::string lora_dtype = "auto";  // unfused adapter factors: auto | f32 | bf16 | q8_0
  std::string activations = "q8";  // how quantized weights meet the activations: q8 | f32
};

// Registers -m/--model, --dtype, --q-bits, --q-group-size, --no-mmap, --merge-policy,
// --fuse-dense, -t/--threads, -c/--ctx-size (with the given help for --ctx-size), --cache-type,
// --lora-dtype and --activations.
void add_model_options(CLI::App& app, ModelArgs& a,
                       const std::string& ctx_help = "Context size in tokens (0 = min(4096, the model's maximum))");

// The adapter options of the commands that run one configuration (generate, perplexity): fused for
// good at load (--adapter, --adapter-scaled) and unfused at a scale (--lora, --lora-scaled).
struct AdapterOptions {
  std::vector<std::string> adapters, adapters_scaled, loras, loras_scaled;
};
void add_adapter_options(CLI::App& app, AdapterOptions& a);
// Reads and checks every adapter they name (before the model is read) into the engine options.
void apply_adapter_options(const AdapterOptions& a, engine::EngineOptions& o);

// -n/--max-tokens and the sampling options (--temp, --top-k, --top-p, --min-p, --repeat-penalty,
// --repeat-last-n, -s/--seed) of the commands that generate (generate, chat).
void add_sampling_options(CLI::App& app, runtime::SamplingParams& s, int64_t& max_tokens);

// "DIR[,DIR]" lists with scale 1 followed by "DIR:SCALE[,...]" lists, in that order.
std::vector<AdapterArg> adapter_args(const std::vector<std::string>& plain, const char* plain_opt,
                                     const std::vector<std::string>& scaled, const char* scaled_opt);

// Engine options from the model arguments (checked here), with a progress bar while loading. A
// model named on the Hub (-hf) is fetched into the Hugging Face cache first, and `a.model` becomes
// its local path. The caller adds the registry's adapters and any adapters fused for good.
engine::EngineOptions engine_options(ModelArgs& a);

// A model or base path as given, or for hf:ORG/NAME[:QUANT] its local path once fetched from the
// Hub (fuse, convert and inspect --base, quantize --model; the commands with -hf take that).
std::string local_model_path(const std::string& path_or_hf);

// The Hub as the environment configures it (graft/hub/hub.h), with a progress bar per download.
hub::Hub hub_from_environment();

// The context a command runs with: --ctx-size, or `dflt` capped at the model's maximum; a
// --ctx-size above the maximum is a bad argument.
int64_t context_size(const ModelArgs& a, const model::ModelConfig& config, int64_t dflt);

// Writes a piece of generated text to stdout at once (a streaming TextCallback; never stops it).
bool print_piece(std::string_view piece);

// The KV cache type --cache-type names (checked when parsed).
DType cache_type(const ModelArgs& a);

// What a run computes with, on stderr: what was fused and the format it is held in (first), the
// activations in force with the weight formats and kernels, and the unfused terms built.
void report_run(engine::Engine& e, const engine::EngineOptions& o);

}  // namespace graft::cli

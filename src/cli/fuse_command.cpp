// graft fuse: merge adapters into a base checkpoint and write a Hugging Face checkpoint. Works on
// any safetensors checkpoint; tensors are merged and written one at a time.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/adapter_args.h"
#include "cli/base_checkpoint.h"
#include "cli/model_args.h"
#include "cli/subcommands.h"
#include "cli/option_checks.h"
#include "cli/progress.h"
#include "graft/adapter/adapted_source.h"
#include "graft/core/error.h"
#include "graft/core/interrupt.h"
#include "graft/io/json_file.h"
#include "graft/io/staged_dir.h"
#include "graft/io/checkpoint_writer.h"
#include "graft/io/safetensors.h"
#include "graft/model/fused_projections.h"
#include "graft/core/thread_pool.h"

namespace graft::cli {

namespace fs = std::filesystem;

namespace {

struct FuseArgs {
  std::string base, out, policy = "DeltaF32", dtype;
  std::vector<std::string> adapters;
  int threads = 0;
  double max_shard_gb = 5.0;
  bool dequantize = false;
};

// Copies everything beside the weights (config, tokenizer, generation config, chat template...).
// A dequantized output drops config.json's quantization blocks (its weights are dense).
void copy_side_files(const fs::path& base_dir, const io::StagedDirectory& out, bool dequantized) {
  for (const auto& e : fs::directory_iterator(base_dir)) {
    if (!e.is_regular_file()) continue;
    const std::string name = e.path().filename().string();
    if (name == "model.safetensors.index.json" || e.path().extension() == ".safetensors") continue;
    if (dequantized && name == "config.json") {
      nlohmann::json j = io::read_json_file(e.path().string(), io::kMaxConfigBytes, "config");
      j.erase("quantization");
      j.erase("quantization_config");
      out.write_file(name, j.dump(2) + "\n");
      continue;
    }
    out.copy_file(e.path().string(), name);
  }
}

int run_fuse(FuseArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<AdapterArg> args;
  for (const auto& s : a.adapters) args.push_back(parse_adapter_arg(s));
  std::optional<DType> dtype;
  if (!a.dtype.empty()) {
    dtype = io::parse_safetensors_dtype(a.dtype == "f32" ? "F32" : a.dtype == "f16" ? "F16" : a.dtype == "bf16" ? "BF16" : a.dtype,
                                        "--dtype");
    if (*dtype != DType::F32 && *dtype != DType::F16 && *dtype != DType::BF16)
      fail_as(ErrorKind::kBadRequest, "--dtype must be F32, F16 or BF16");
  }
  const adapter::MergePolicy policy = adapter::parse_merge_policy(a.policy);
  a.base = local_model_path(a.base);  // hf:ORG/NAME, once the arguments are checked
  if (fs::exists(a.out) && fs::equivalent(a.out, a.base)) fail_as(ErrorKind::kBadRequest, "--out must differ from --base");
  if (fs::exists(a.out) && (!fs::is_directory(a.out) || !fs::is_empty(a.out)))
    fail_as(ErrorKind::kBadRequest, "output directory '", a.out, "' exists and is not empty; refusing to overwrite");
  install_interrupt_handlers();  // SIGINT/SIGTERM unwind through the staging directory below

  BaseCheckpoint base = open_base_checkpoint(a.base);
  auto uses = read_adapters(args);
  if (a.dequantize && base.quantized_weights.empty()) fail_as(ErrorKind::kBadRequest, "--dequantize: '", a.base, "' is not a quantized checkpoint");
  // Every check before any write. A quantized base is refused unless --dequantize (then every
  // quantized weight is written dense, as mlx_lm.fuse --dequantize does).
  auto plan = bind_for_fuse(base, uses, a.dequantize);

  ThreadPool pool(a.threads);
  adapter::AdaptedSourceOptions opts;
  opts.policy = policy;
  opts.dtype = dtype;
  opts.pool = &pool;
  std::shared_ptr<const io::TensorSource> source = adapter::make_weight_adapter_source(base.source, plan, opts);
  // A fused family is read split (model/fused_projections.h) and written in its own layout again.
  if (base.config) source = model::join_fused_projections(source, *base.config);

  io::CheckpointWriteOptions w;
  w.dtype = dtype;
  w.max_shard_bytes = static_cast<uint64_t>(a.max_shard_gb * 1e9);  // range-checked by the option
  ProgressBar bar("fusing");
  w.progress = [&](int64_t d, int64_t t) { bar.update(d, t); };
  // Everything is written into a staging directory beside --out and renamed into place at the
  // end: --out holds a complete checkpoint or nothing.
  io::StagedDirectory staged(a.out);
  const io::CheckpointWriteResult r = io::write_checkpoint(*source, staged.path(), w);
  if (base.is_directory) copy_side_files(a.base, staged, a.dequantize);
  throw_if_interrupted();
  staged.commit();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "fused %zu adapter(s) into %zu tensor(s) with %s; wrote %lld tensors (%.1f MB) in %lld shard(s) to %s in %.2f s\n",
               uses.size(), plan->updates.size(), adapter::policy_name(policy), static_cast<long long>(r.tensors),
               r.bytes / 1e6, static_cast<long long>(r.shards), a.out.c_str(), secs);
  return 0;
}

}  // namespace

Runner add_fuse_command(CLI::App& app) {
  auto a = std::make_shared<FuseArgs>();
  app.add_option("--base", a->base, "Base checkpoint: a Hugging Face directory or a .safetensors file (any model)")->required();
  app.add_option("--adapter", a->adapters,
                 "Adapter directory or file, optionally with a strength: DIR[:SCALE] (repeatable; adapters stack)")
      ->required();
  app.add_option("-o,--out", a->out, "Output directory for the merged checkpoint (must not exist or be empty)")->required()->check(not_empty());
  app.add_option("--policy", a->policy, "Merge arithmetic: DeltaF32 | RankWiseF32 | RoundedBF16Delta")->capture_default_str();
  app.add_option("--dtype", a->dtype, "Output dtype for floating-point tensors: F32 | F16 | BF16 (default: keep each tensor's)");
  app.add_option("--max-shard-gb", a->max_shard_gb, "Shard size limit in GB (an index is written when sharded)")
      ->check(number_in(0.001, 1e6))
      ->capture_default_str();
  app.add_option("-t,--threads", a->threads, "Worker threads (0 = all cores)")
      ->check(number_in(0, 4096))
      ->capture_default_str();
  app.add_flag("--dequantize", a->dequantize,
               "Base is mlx-quantized: write every weight dense (dequantized) with the adapters merged, "
               "and drop the quantization block from config.json");
  app.footer(
      "Every adapter is validated against the base before anything is written.\n"
      "Example: graft fuse --base models/llama --adapter my-lora:0.8 --out models/llama-merged");
  return [a] { return run_fuse(*a); };
}

}  // namespace graft::cli

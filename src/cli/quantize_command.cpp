// graft quantize: a dense Hugging Face model -> an mlx-lm affine-quantized checkpoint that mlx-lm
// and graft both load (the same bits as `mlx_lm.convert -q` on the CPU).
#include <chrono>
#include <cstdio>

#include "cli/adapter_args.h"
#include "cli/model_args.h"
#include "cli/subcommands.h"
#include "cli/option_checks.h"
#include "cli/progress.h"
#include "graft/core/error.h"
#include "graft/core/interrupt.h"
#include "graft/model/quantize.h"

namespace graft::cli {

namespace {

struct QuantizeArgs {
  std::string model, out, dtype;
  int bits = 4;
  int group_size = 64;
};

int run_quantize(QuantizeArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  model::QuantizeOptions o;
  o.bits = a.bits;
  o.group_size = a.group_size;
  o.dtype = parse_float_dtype(a.dtype);
  a.model = local_model_path(a.model);  // hf:ORG/NAME, once the arguments are checked
  install_interrupt_handlers();  // SIGINT/SIGTERM unwind through quantize's staging directory
  ProgressBar bar("quantizing");
  o.progress = [&](int64_t d, int64_t t) { bar.update(d, t); };
  const model::QuantizeResult r = model::quantize_checkpoint(a.model, a.out, o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "quantized %lld modules to %d bits (group %d), kept %lld tensors; %.1f MB written to %s in %.2f s\n",
               static_cast<long long>(r.quantized_modules), a.bits, a.group_size, static_cast<long long>(r.kept_tensors),
               r.bytes / 1e6, a.out.c_str(), secs);
  return 0;
}

}  // namespace

Runner add_quantize_command(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  app.add_option("-m,--model", a->model, "Dense Hugging Face model directory (config.json + safetensors)")->required();
  app.add_option("-o,--out", a->out, "Output directory (must not exist or be empty)")->required()->check(not_empty());
  app.add_option("--bits", a->bits, "Bits per weight: 4 | 8")->check(one_of({4, 8}))->capture_default_str();
  app.add_option("--group-size", a->group_size, "Weights per scale/bias group: 32 | 64 | 128")
      ->check(one_of({32, 64, 128}))
      ->capture_default_str();
  app.add_option("--dtype", a->dtype, "Convert weights (and so scales/biases) to F32 | F16 | BF16 first (default: as stored)");
  app.footer(
      "Quantizes the embedding, every projection and an untied lm_head whose width divides by the group size;\n"
      "norms and biases are copied. Example: graft quantize -m models/llama -o models/llama-4bit --bits 4 --group-size 64");
  return [a] { return run_quantize(*a); };
}

}  // namespace graft::cli

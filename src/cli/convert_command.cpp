// graft convert: write one adapter (any format graft reads) as a llama.cpp GGUF LoRA file for a
// Llama-family base, as convert_lora_to_gguf.py would (model/gguf_adapters.h has the rules).
#include <cstdio>
#include <filesystem>

#include "cli/adapter_args.h"
#include "cli/base_checkpoint.h"
#include "cli/model_args.h"
#include "cli/subcommands.h"
#include "cli/progress.h"
#include "graft/core/error.h"
#include "graft/io/gguf_writer.h"
#include "graft/model/gguf_adapters.h"

namespace graft::cli {

namespace {

struct ConvertArgs {
  std::string base, adapter, out, outtype;
};

int run_convert(ConvertArgs& a) {
  namespace fs = std::filesystem;
  if (a.out.size() < 5 || a.out.compare(a.out.size() - 5, 5, ".gguf") != 0)
    fail_as(ErrorKind::kBadRequest, "--out '", a.out, "': expected a .gguf file name");
  if (fs::exists(a.out)) fail_as(ErrorKind::kBadRequest, "--out '", a.out, "' exists; refusing to overwrite");
  const std::optional<DType> dtype = parse_float_dtype(a.outtype);
  a.base = local_model_path(a.base);  // hf:ORG/NAME, once the arguments are checked
  const auto uses = read_adapters({parse_adapter_arg(a.adapter)});
  const BaseCheckpoint base = open_base_checkpoint(a.base);
  if (!base.config)
    fail_as(ErrorKind::kBadRequest, "--base '", a.base, "' is a ", base.kind,
            " without a Llama-family config.json; GGUF LoRA files name llama.cpp's tensors of a supported family");
  const model::GgufLoraFile f = model::gguf_lora_for_model(*base.config, *base.source, uses[0], dtype);
  {
    ProgressBar bar("writing " + a.out);  // (cleared before the summary line below)
    io::write_gguf(a.out, f.metadata, f.tensors, [&](int64_t d, int64_t t) { bar.update(d, t); });
  }
  std::fprintf(stderr, "wrote %s: %zu tensors (%zu LoRA pairs)%s\n", a.out.c_str(), f.tensors.size(),
               f.tensors.size() / 2,
               f.scales_folded ? "; scales differ per pair, so each is folded into its lora_b (adapter.lora.alpha 0)"
                               : "");
  return 0;
}

}  // namespace

Runner add_convert_command(CLI::App& app) {
  auto a = std::make_shared<ConvertArgs>();
  app.add_option("--base", a->base, "Llama-family base model (Hugging Face directory or GGUF) the adapter is for")
      ->required();
  app.add_option("--adapter", a->adapter, "Adapter (any format graft reads), optionally PATH:SCALE")->required();
  app.add_option("-o,--out", a->out, "Output .gguf file (must not exist)")->required();
  app.add_option("--outtype", a->outtype, "Factor dtype: F32 | F16 | BF16 (default: keep each factor's)");
  app.footer("Writes a llama.cpp LoRA adapter (general.type adapter): llama.cpp tensor names, q/k rows in its RoPE "
             "order, scale as adapter.lora.alpha. llama.cpp loads it with --lora; graft with --lora or --adapter.");
  return [a] { return run_convert(*a); };
}

}  // namespace graft::cli

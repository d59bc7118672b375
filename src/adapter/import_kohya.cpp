// Single-file ComfyUI / kohya-ss / A1111 / LyCORIS adapters (.safetensors, no config).
//
//   <name>.lora_down.weight [r, in], <name>.lora_up.weight [out, r], optional <name>.alpha (0-d):
//     scale alpha / r, r = rows of lora_down; 1.0 when alpha is missing (the ComfyUI / A1111
//     loader rule). alpha = 0 is refused: kohya's loader reads it as alpha = r, ComfyUI/A1111 as 0.
//   <name>.diff / <name>.diff_b: full additive deltas of the weight / bias (scale 1).
//   <name>.set_weight: full replacement of the weight (unscaled).
//   <name>.hada_w1_a [out, r], .hada_w1_b [r, in], .hada_w2_a, .hada_w2_b, optional <name>.alpha:
//     LyCORIS LoHa, ΔW = (alpha / r)·(w1_a·w1_b) ⊙ (w2_a·w2_b) with r = rows of hada_w1_b; alpha missing
//     or 0 means alpha = r (scale 1), as LyCORIS's LohaModule. (LyCORIS 4.1.3's get_diff_weight /
//     merge_to apply the scale twice; its forward pass and ComfyUI apply it once, as graft does.)
//   <name>.lokr_w1[_a/_b], <name>.lokr_w2[_a/_b], optional <name>.alpha: LyCORIS LoKr. dim = rows of
//     w1_b when w1 is factored, overwritten by rows of w2_b when w2 is factored; alpha missing or 0
//     means alpha = dim; both factors full means scale 1 (LyCORIS sets alpha = dim there); else
//     alpha / dim.
// Module names keep the file's prefix (lora_unet_…, lora_te_…, lycoris_…): bindings map them.
// Everything else (lora_mid, dora_scale, OFT, IA3, GLoRA, norm diffs, Tucker cores, PEFT or
// mlx-lm key names) is refused naming the key.
#include <string>

#include "import_common.h"

namespace graft::adapter::detail {

namespace {

enum Role { kUp, kDown, kAlpha, kDiff, kDiffB, kSet, kLokr, kLoha, kRefused };
struct SuffixRole {
  std::string_view suffix;
  Role role;
  const char* why = nullptr;  // for kRefused: what it is; for kLokr: the role name
};

const char* kPeftWhy =
    "is a PEFT key: PEFT adapters are read from their directory (adapter_config.json holds r and lora_alpha; a "
    "config beside a single file is never applied)";
const char* kMlxWhy =
    "is an mlx-lm key: mlx-lm adapters are read from their directory (adapter_config.json holds the scale)";
const char* kDiffusersWhy = "uses diffusers LoRA naming, which graft does not read; convert to lora_up/lora_down";

const std::vector<SuffixRole> kTable = {
    {".lora_up.weight", kUp}, {".lora_down.weight", kDown}, {".alpha", kAlpha},
    {".diff", kDiff}, {".diff_b", kDiffB}, {".set_weight", kSet},
    {".lokr_w1", kLokr, "lokr_w1"}, {".lokr_w1_a", kLokr, "lokr_w1_a"}, {".lokr_w1_b", kLokr, "lokr_w1_b"},
    {".lokr_w2", kLokr, "lokr_w2"}, {".lokr_w2_a", kLokr, "lokr_w2_a"}, {".lokr_w2_b", kLokr, "lokr_w2_b"},
    {".lora_mid.weight", kRefused, "is a LoCon mid (CP/Tucker) factor: not supported"},
    {".dora_scale", kRefused, "is a DoRA magnitude: DoRA adapters are not supported"},
    {".hada_w1_a", kLoha, "hada_w1_a"}, {".hada_w1_b", kLoha, "hada_w1_b"},
    {".hada_w2_a", kLoha, "hada_w2_a"}, {".hada_w2_b", kLoha, "hada_w2_b"},
    {".hada_t1", kRefused, "is a LoHa Tucker core: not supported"},
    {".hada_t2", kRefused, "is a LoHa Tucker core: not supported"},
    {".lokr_t1", kRefused, "is a LoKr Tucker core: not supported"},
    {".lokr_t2", kRefused, "is a LoKr Tucker core: not supported"},
    {".oft_blocks", kRefused, "is an OFT/BOFT factor: not supported"},
    {".oft_diag", kRefused, "is an OFT factor: not supported"},
    {".rescale", kRefused, "is an OFT/BOFT rescale: not supported"},
    {".on_input", kRefused, "is an IA3 flag: IA3 is not supported"},
    {".w_norm", kRefused, "is a norm-layer diff: not supported"},
    {".b_norm", kRefused, "is a norm-layer diff: not supported"},
    {".a1.weight", kRefused, "is a GLoRA factor: not supported"},
    {".a2.weight", kRefused, "is a GLoRA factor: not supported"},
    {".b1.weight", kRefused, "is a GLoRA factor: not supported"},
    {".b2.weight", kRefused, "is a GLoRA factor: not supported"},
    {".bm.weight", kRefused, "is a GLoRA factor: not supported"},
    {".scale", kRefused, "is an A1111 per-module scale override: not supported"},
    {".reshape_weight", kRefused, "is a ComfyUI reshape: not supported"},
    {".lora_A.weight", kRefused, kPeftWhy}, {".lora_B.weight", kRefused, kPeftWhy},
    {".lora_A.default.weight", kRefused, kPeftWhy}, {".lora_B.default.weight", kRefused, kPeftWhy},
    {".lora_embedding_A", kRefused, kPeftWhy}, {".lora_embedding_B", kRefused, kPeftWhy},
    {".lora_magnitude_vector", kRefused, kPeftWhy},
    {".lora_a", kRefused, kMlxWhy}, {".lora_b", kRefused, kMlxWhy},
    {".lora.up.weight", kRefused, kDiffusersWhy}, {".lora.down.weight", kRefused, kDiffusersWhy},
    {"_lora.up.weight", kRefused, kDiffusersWhy}, {"_lora.down.weight", kRefused, kDiffusersWhy},
    {".lora_linear_layer.up.weight", kRefused, kDiffusersWhy},
    {".lora_linear_layer.down.weight", kRefused, kDiffusersWhy},
};

struct ModuleKeys {
  std::string up, down, alpha, diff, diff_b, set;
  RoleKeys lokr, loha;
};

const Tensor& need_dims(const std::string& file, const std::string& key, const Tensor& t, size_t lo, size_t hi,
                        const char* expected) {
  if (t.shape.size() < lo || t.shape.size() > hi || t.numel() == 0)
    fail_as(ErrorKind::kUnsupported, "'", file, "': tensor '", key, "' has shape ", shape_str(t.shape),
         t.shape.size() == 4 ? ": convolution factors are not supported" : "", "; expected ", expected);
  return t;
}

}  // namespace

WeightAdapter import_single_file(const std::string& path) {
  WeightAdapter out;
  out.path = path;
  out.format = AdapterFormat::Kohya;
  auto f = io::SafetensorsFile::open(path);
  for (const auto& [k, v] : f->metadata())
    if (starts_with(k, "ss_network_")) out.metadata[k] = v;

  std::vector<std::string_view> suffixes;
  for (const auto& e : kTable) suffixes.push_back(e.suffix);
  std::map<std::string, ModuleKeys> modules;
  for (const auto& e : f->entries()) {
    const std::string& key = e.name;
    SplitKey sk = split_key(key, suffixes);
    if (sk.suffix < 0) {
      if (starts_with(key, "base_model.model.")) fail("'", path, "': tensor '", key, "' ", kPeftWhy);
      fail("'", path, "': tensor '", key, "' is not a key graft reads in a single-file adapter; expected "
           "<name>.lora_up.weight / .lora_down.weight / .alpha, .diff, .diff_b, .set_weight or LyCORIS "
           "<name>.lokr_w1[_a|_b] / .lokr_w2[_a|_b]");
    }
    const SuffixRole& sr = kTable[static_cast<size_t>(sk.suffix)];
    if (sr.role == kRefused) fail("'", path, "': tensor '", key, "' ", sr.why, "; expected LoRA/LoKr/diff keys");
    ModuleKeys& mk = modules[sk.module];
    switch (sr.role) {
      case kUp: mk.up = key; break;
      case kDown: mk.down = key; break;
      case kAlpha: mk.alpha = key; break;
      case kDiff: mk.diff = key; break;
      case kDiffB: mk.diff_b = key; break;
      case kSet: mk.set = key; break;
      case kLokr:
        mk.lokr[sr.why] = key;
        out.format = AdapterFormat::Lycoris;
        break;
      case kLoha:
        mk.loha[sr.why] = key;
        out.format = AdapterFormat::Lycoris;
        break;
      default: break;
    }
    if (starts_with(key, "lycoris_")) out.format = AdapterFormat::Lycoris;
  }
  if (modules.empty()) fail("'", path, "': no tensors; expected LoRA/LoKr/diff keys");

  for (const auto& [module, mk] : modules) {
    const bool lora = !mk.up.empty() || !mk.down.empty();
    const bool lokr = !mk.lokr.empty(), loha = !mk.loha.empty();
    if (int(lora) + int(lokr) + int(loha) > 1)
      fail("'", path, "': module '", module, "' has factors of more than one kind (", lora ? "LoRA lora_up/lora_down; " : "",
           lokr ? "LoKr lokr_*; " : "", loha ? "LoHa hada_*; " : "", "); expected one kind per module");
    std::optional<double> alpha;
    if (!mk.alpha.empty()) {
      if (!lora && !lokr && !loha)
        fail("'", path, "': tensor '", mk.alpha, "' has no lora_up/lora_down or lokr_* factors beside it; expected "
             "alpha only with factors");
      alpha = read_scalar(*f, mk.alpha);
    }
    if (lora) {
      if (mk.up.empty() || mk.down.empty())
        fail("'", path, "': tensor '", mk.up.empty() ? mk.down : mk.up, "' has no partner ",
             mk.up.empty() ? "lora_up.weight" : "lora_down.weight", "; expected both halves of each pair");
      Tensor down = read_checked(*f, mk.down), up = read_checked(*f, mk.up);
      need_dims(path, mk.down, down, 2, 2, "lora_down.weight [r, in]");
      need_dims(path, mk.up, up, 2, 2, "lora_up.weight [out, r]");
      if (up.shape[1] != down.shape[0])
        fail("'", path, "': tensors '", mk.up, "' ", shape_str(up.shape), " and '", mk.down, "' ",
             shape_str(down.shape), " do not pair; expected lora_up.weight [out, r] and lora_down.weight [r, in]");
      const int64_t r = down.shape[0];
      if (alpha && *alpha == 0)
        fail("'", path, "': tensor '", mk.alpha, "' is 0: loaders disagree on it (kohya reads alpha = rank, "
             "ComfyUI/A1111 scale 0); expected a non-zero alpha or none (scale 1)");
      double scale = alpha ? *alpha / static_cast<double>(r) : 1.0;
      AdapterTarget t;
      t.module = module;
      t.keys = {mk.down, mk.up};
      if (!mk.alpha.empty()) t.keys.push_back(mk.alpha);
      t.update = LowRankUpdate{down, up, static_cast<float>(scale)};
      out.targets.push_back(std::move(t));
    }
    if (lokr) {
      KroneckerUpdate u = read_kronecker(*f, module, mk.lokr);
      std::optional<int64_t> dim = lycoris_lokr_dim(u);
      double scale = 1.0;
      if (dim && alpha && *alpha != 0) scale = *alpha / static_cast<double>(*dim);
      u.scale = static_cast<float>(scale);
      AdapterTarget t;
      t.module = module;
      for (const auto& [role, key] : mk.lokr) t.keys.push_back(key);
      if (!mk.alpha.empty()) t.keys.push_back(mk.alpha);
      t.update = std::move(u);
      out.targets.push_back(std::move(t));
    }
    if (loha) {
      HadamardUpdate u = read_hadamard(*f, module, mk.loha);
      const int64_t dim = u.w1b.shape[0];
      u.scale = static_cast<float>(alpha && *alpha != 0 ? *alpha / static_cast<double>(dim) : 1.0);
      AdapterTarget t;
      t.module = module;
      for (const auto& [role, key] : mk.loha) t.keys.push_back(key);
      if (!mk.alpha.empty()) t.keys.push_back(mk.alpha);
      t.update = std::move(u);
      out.targets.push_back(std::move(t));
    }
    if (!mk.diff.empty()) {
      Tensor d = read_checked(*f, mk.diff);
      need_dims(path, mk.diff, d, 1, 2, "a full 2-D weight delta (or 1-D for a vector weight)");
      out.targets.push_back(AdapterTarget{module, "weight", DiffUpdate{d, 1.0f}, {mk.diff}, false});
    }
    if (!mk.diff_b.empty()) {
      Tensor d = read_checked(*f, mk.diff_b);
      need_dims(path, mk.diff_b, d, 1, 1, "a 1-D bias delta");
      out.targets.push_back(AdapterTarget{module, "bias", DiffUpdate{d, 1.0f}, {mk.diff_b}, false});
    }
    if (!mk.set.empty()) {
      Tensor v = read_checked(*f, mk.set);
      need_dims(path, mk.set, v, 1, 2, "a full 2-D weight (or 1-D for a vector weight)");
      out.targets.push_back(AdapterTarget{module, "weight", Replacement{v}, {mk.set}, false});
    }
  }
  finalize_targets(out, path);
  return out;
}

}  // namespace graft::adapter::detail

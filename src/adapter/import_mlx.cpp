// mlx-lm native adapters: adapter_config.json + adapters.safetensors (fallback
// adapter_model.safetensors; no shards, no other files).
//
// Keys end exactly in `.lora_a` / `.lora_b` (and `.m` with fine_tune_type "dora": the DoRA magnitude,
// one value per row of ΔW, required beside every pair; mlx-lm's DoRALinear and DoRAEmbedding both
// normalize per row of the stored weight, [out, in] and [vocab, hidden]); anything else is refused
// (stray `.weight`, PEFT names). mlx-lm writes LoRALinear as lora_a [in, r], lora_b [r, out] (A = lora_aᵀ,
// B = lora_bᵀ); the matrix orientation lora_a [r, in], lora_b [out, r] is accepted when the shapes
// tell the two apart. LoRAEmbedding pairs (lora_a [vocab, r], lora_b [r, hidden],
// Δ = s·lora_a·lora_b) cannot be told from a Linear pair by shape, so the module name decides: a
// module whose last path component is `embed_tokens` is read as an embedding (the importer has
// no model to ask), keeping the Linear-shaped reading as an alternative that binding picks when
// the vocabulary size says so.
//
// LoRASwitchLinear (mixture-of-experts SwitchGLU projections, mlx_lm/tuner/lora.py): lora_a
// [E, r, in], lora_b [E, out, r], expert e's update scale · lora_b[e] · lora_a[e]. Each expert's pair
// is emitted as module `<parent>.<e>.<name>` for a module `<parent>.<name>` (switch_mlp.gate_proj
// → switch_mlp.<e>.gate_proj), the per-expert name a model binds.
//
// Scale: lora_parameters.scale verbatim (default 20.0); lora_parameters.lora_alpha, when present,
// gives lora_alpha / rank (mlxcel's extension), rank = lora_parameters.rank (default 8).
#include <algorithm>
#include <string>

#include "import_common.h"

namespace graft::adapter::detail {

namespace {

enum Role { kA, kB, kDora, kPeft };
const std::vector<std::string_view> kSuffixes = {
    ".lora_a", ".lora_b", ".m",
    ".lora_A.weight", ".lora_B.weight", ".lora_A.default.weight", ".lora_B.default.weight",
    ".lora_embedding_A", ".lora_embedding_B", ".lora_magnitude_vector"};
Role role_of(int suffix) { return suffix <= 2 ? static_cast<Role>(suffix) : kPeft; }

bool is_embedding_module(const std::string& module) {
  auto dot = module.rfind('.');
  return (dot == std::string::npos ? module : module.substr(dot + 1)) == "embed_tokens";
}

struct Config {
  bool dora = false;
  double scale = 20.0;
  int64_t rank = 8;
  bool rank_given = false;
};

Config read_config(const std::string& path, const Json& cfg, std::map<std::string, std::string>& meta) {
  std::string ftt = "lora";
  if (cfg.contains("fine_tune_type") && !cfg["fine_tune_type"].is_null()) {
    if (!cfg["fine_tune_type"].is_string())
      fail("'", path, "': field 'fine_tune_type' is ", json_brief(cfg["fine_tune_type"]), "; expected \"lora\"");
    ftt = cfg["fine_tune_type"].get<std::string>();
  }
  if (ftt == "full")
    fail("'", path, "': field 'fine_tune_type' is \"full\": a full fine-tune holds whole weights, not an adapter; "
         "expected \"lora\"");
  if (ftt != "lora" && ftt != "dora")
    fail("'", path, "': field 'fine_tune_type' is \"", ftt, "\"; expected \"lora\" or \"dora\"");
  if (cfg.contains("use_dora") && !json_unset(cfg["use_dora"]))
    fail("'", path, "': field 'use_dora' is set: mlx-lm marks DoRA with fine_tune_type \"dora\"; expected false");
  meta["fine_tune_type"] = ftt;

  Config c;
  c.dora = ftt == "dora";
  const Json* lp = nullptr;
  if (cfg.contains("lora_parameters") && !cfg["lora_parameters"].is_null()) {
    lp = &cfg["lora_parameters"];
    if (!lp->is_object())
      fail("'", path, "': field 'lora_parameters' is ", json_brief(*lp), "; expected an object");
  }
  auto get = [&](const char* k) -> const Json* {
    return lp && lp->contains(k) && !(*lp)[k].is_null() ? &(*lp)[k] : nullptr;
  };
  if (const Json* r = get("rank")) {
    c.rank = json_positive_int(*r, path, "lora_parameters.rank");
    c.rank_given = true;
  }
  if (const Json* s = get("scale")) c.scale = json_number(*s, path, "lora_parameters.scale");
  if (const Json* a = get("lora_alpha")) {
    double alpha = json_number(*a, path, "lora_parameters.lora_alpha");
    c.scale = alpha / static_cast<double>(c.rank);
    meta["lora_alpha"] = num_str(alpha);
  }
  if (const Json* d = get("dropout")) json_number(*d, path, "lora_parameters.dropout");  // training only
  if (const Json* k = get("keys")) meta["keys"] = k->dump();
  meta["rank"] = std::to_string(c.rank);
  meta["scale"] = num_str(static_cast<float>(c.scale));
  for (const char* k : {"num_layers", "lora_layers", "target_modules", "model"})
    if (cfg.contains(k) && !cfg[k].is_null())
      meta[k] = cfg[k].is_string() ? cfg[k].get<std::string>() : cfg[k].dump();
  return c;
}

// Normalizes one Linear pair to A [r, in], B [out, r].
LowRankUpdate linear_pair(const io::SafetensorsFile& f, const std::string& ka, const Tensor& a, const std::string& kb,
                          const Tensor& b, const Config& cfg) {
  const bool mlx = a.shape[1] == b.shape[0];     // lora_a [in, r], lora_b [r, out]
  const bool matrix = a.shape[0] == b.shape[1];  // lora_a [r, in], lora_b [out, r]
  const std::string shapes = "'" + ka + "' " + shape_str(a.shape) + " and '" + kb + "' " + shape_str(b.shape);
  if (!mlx && !matrix)
    fail("'", f.path(), "': tensors ", shapes,
         " do not pair; expected lora_a [in, r] with lora_b [r, out] (mlx-lm) or lora_a [r, in] with lora_b [out, r]");
  bool use_mlx = mlx;
  if (mlx && matrix) {
    // Both readings fit: mlx-lm gives r = a[1] and ΔW [a[0], a[0]], the matrix reading r = a[0]
    // and ΔW [a[1], a[1]]. Equal ΔW shapes cannot be told apart; otherwise the config rank, then
    // the reading whose rank does not exceed its dimensions, decides. A wrong pick still has the
    // wrong ΔW shape, so the binding refuses it instead of applying a transposed delta.
    if (a.shape[0] == a.shape[1])
      fail("'", f.path(), "': tensors ", shapes,
           " are ambiguous: read as mlx-lm (lora_a [in, r], lora_b [r, out]) and as lora_a [r, in], lora_b [out, r] "
           "they give different updates of the same shape; expected shapes that fix the orientation");
    if (cfg.rank_given && (a.shape[1] == cfg.rank) != (a.shape[0] == cfg.rank))
      use_mlx = a.shape[1] == cfg.rank;
    else
      use_mlx = a.shape[1] < a.shape[0];
  }
  LowRankUpdate u;
  if (use_mlx) {
    u.a = transpose_2d(a);
    u.b = transpose_2d(b);
  } else {
    u.a = a;
    u.b = b;
  }
  u.scale = static_cast<float>(cfg.scale);
  return u;
}

// One LoRASwitchLinear pair cut per expert (see the file comment).
void switch_pairs(const std::string& file, const std::string& module,
                  const std::string& a_key, const Tensor& a, const std::string& b_key, const Tensor& b,
                  const Config& c, std::vector<AdapterTarget>& out) {
  if (a.shape.size() != 3 || b.shape.size() != 3 || a.shape[0] != b.shape[0] || a.shape[1] != b.shape[2] ||
      a.shape[0] == 0 || a.shape[1] == 0 || a.shape[2] == 0 || b.shape[1] == 0)
    fail("'", file, "': tensors '", a_key, "' ", shape_str(a.shape), " and '", b_key, "' ", shape_str(b.shape),
         " do not pair; expected a LoRASwitchLinear pair lora_a [experts, r, in] and lora_b [experts, out, r]");
  if (is_embedding_module(module))
    fail("'", file, "': module '", module, "' is an embedding with 3-D factors; expected a 2-D LoRAEmbedding pair");
  const size_t dot = module.rfind('.');
  if (dot == std::string::npos || dot == 0)
    fail("'", file, "': module '", module, "' holds 3-D (LoRASwitchLinear) factors but has no parent module; "
         "expected <parent>.<projection> such as mlp.switch_mlp.gate_proj");
  const int64_t experts = a.shape[0], r = a.shape[1], in = a.shape[2], outs = b.shape[1];
  const Tensor fa = convert_tensor(a, DType::F32), fb = convert_tensor(b, DType::F32);
  for (int64_t e = 0; e < experts; ++e) {
    Tensor ae = Tensor::zeros_f32({r, in}), be = Tensor::zeros_f32({outs, r});
    std::copy_n(fa.as<float>() + e * r * in, r * in, ae.mutable_as<float>());
    std::copy_n(fb.as<float>() + e * outs * r, outs * r, be.mutable_as<float>());
    AdapterTarget t;
    t.module = module.substr(0, dot) + "." + std::to_string(e) + module.substr(dot);
    t.keys = {a_key, b_key};
    t.update = LowRankUpdate{std::move(ae), std::move(be), static_cast<float>(c.scale)};
    out.push_back(std::move(t));
  }
}

}  // namespace

WeightAdapter import_mlx(const std::string& dir, const std::string& config_path, const Json& cfg) {
  WeightAdapter out;
  out.path = dir;
  out.format = AdapterFormat::MlxLm;
  Config c = read_config(config_path, cfg, out.metadata);

  std::string file = join_path(dir, "adapters.safetensors");
  if (!file_exists(file)) file = join_path(dir, "adapter_model.safetensors");
  if (!file_exists(file))
    fail("'", dir, "': mlx-lm adapter directory has no adapters.safetensors (or adapter_model.safetensors); "
         "sharded files, .npz and other file names are not read");
  auto f = io::SafetensorsFile::open(file);
  out.metadata["file"] = file;

  std::map<std::string, std::pair<std::string, std::string>> pairs;  // module → (lora_a key, lora_b key)
  std::map<std::string, std::string> magnitudes;                       // module → .m key (DoRA)
  for (const auto& e : f->entries()) {
    SplitKey sk = split_key(e.name, kSuffixes);
    Role role = sk.suffix < 0 ? kPeft : role_of(sk.suffix);
    if (sk.suffix < 0)
      fail("'", file, "': tensor '", e.name,
           "' is not part of the mlx-lm native contract; expected only keys ending in .lora_a / .lora_b");
    if (role == kDora) {
      if (!c.dora)
        fail("'", file, "': tensor '", e.name, "' is a DoRA magnitude vector but adapter_config.json's "
             "fine_tune_type is not \"dora\"; expected only .lora_a / .lora_b");
      magnitudes[sk.module] = e.name;
      continue;
    }
    if (role == kPeft)
      fail("'", file, "': tensor '", e.name,
           "': PEFT key names are not part of the mlx-lm native contract; expected keys ending in .lora_a / .lora_b "
           "(a PEFT adapter needs a PEFT adapter_config.json with peft_type)");
    auto& p = pairs[sk.module];
    (role == kA ? p.first : p.second) = e.name;
  }
  if (pairs.empty()) fail("'", file, "': no .lora_a / .lora_b tensors; expected at least one pair");

  for (const auto& [module, keys] : pairs) {
    if (keys.first.empty() || keys.second.empty())
      fail("'", file, "': tensor '", keys.first.empty() ? keys.second : keys.first, "' has no partner '", module,
           keys.first.empty() ? ".lora_a" : ".lora_b", "'; expected both halves of each pair");
    Tensor a = read_checked(*f, keys.first);
    Tensor b = read_checked(*f, keys.second);
    if (a.shape.size() == 3 || b.shape.size() == 3) {
      if (c.dora || magnitudes.count(module))
        fail("'", file, "': module '", module, "' is a 3-D (LoRASwitchLinear) pair with fine_tune_type \"dora\": "
             "mlx-lm has no DoRA for switch layers; expected plain lora_a / lora_b");
      switch_pairs(file, module, keys.first, a, keys.second, b, c, out.targets);
      continue;
    }
    for (const auto* kt : {&keys.first, &keys.second}) {
      const Tensor& t = kt == &keys.first ? a : b;
      if (t.shape.size() != 2 || t.shape[0] == 0 || t.shape[1] == 0)
        fail("'", file, "': tensor '", *kt, "' has shape ", shape_str(t.shape), "; expected a non-empty 2-D matrix");
    }
    AdapterTarget t;
    t.module = module;
    t.keys = {keys.first, keys.second};
    if (is_embedding_module(module)) {
      // Three layouts, all giving Δ[vocab, hidden]:
      //  * LoRAEmbedding (what mlx-lm writes): lora_a [vocab, r], lora_b [r, hidden], Δ = s·lora_a·lora_b;
      //  * Linear-shaped mlx orientation: lora_a [hidden, r], lora_b [r, vocab], Δ = s·(lora_a·lora_b)ᵀ;
      //  * matrix orientation: lora_a [r, hidden], lora_b [vocab, r], Δ = s·lora_b·lora_a.
      // The first two have the same shape pattern; binding matches them against the vocabulary.
      LowRankUpdate u;
      u.scale = static_cast<float>(c.scale);
      if (a.shape[1] == b.shape[0]) {
        u.b = a;
        u.a = b;
        t.transposed = LowRankUpdate{transpose_2d(a), transpose_2d(b), u.scale};
      } else if (a.shape[0] == b.shape[1]) {
        u.b = b;
        u.a = a;
      } else {
        fail("'", file, "': embedding tensors '", keys.first, "' ", shape_str(a.shape), " and '", keys.second, "' ",
             shape_str(b.shape), " do not pair; expected the mlx-lm LoRAEmbedding layout lora_a [vocab, r], "
             "lora_b [r, hidden], or a Linear-shaped pair (lora_a [hidden, r], lora_b [r, vocab] or lora_a [r, hidden], "
             "lora_b [vocab, r])");
      }
      t.update = std::move(u);
      t.embedding = true;
    } else {
      t.update = linear_pair(*f, keys.first, a, keys.second, b, c);
    }
    if (c.dora) {
      auto mit = magnitudes.find(module);
      if (mit == magnitudes.end())
        fail("'", file, "': module '", module, "' has no DoRA magnitude '", module, ".m' but fine_tune_type is "
             "\"dora\"; expected one beside every pair");
      Tensor m = read_checked(*f, mit->second);
      t.keys.push_back(mit->second);
      // ΔW rows are the normalized B's rows; for an embedding pair with two readings the magnitude's
      // length (vocab rows, as mlx-lm's DoRAEmbedding) picks the one whose rows it fits.
      if (t.transposed && m.shape.size() == 1 &&
          m.shape[0] != std::get<LowRankUpdate>(t.update).b.shape[0] &&
          m.shape[0] == std::get<LowRankUpdate>(*t.transposed).b.shape[0]) {
        t.update = *t.transposed;
        t.transposed.reset();
      }
      const int64_t rows = std::get<LowRankUpdate>(t.update).b.shape[0];
      if (m.shape.size() != 1 || m.shape[0] != rows)
        fail("'", file, "': tensor '", mit->second, "' has shape ", shape_str(m.shape), " but module '", module,
             "' has ", rows, " output rows; expected a DoRA magnitude [", rows, "]");
      t.update = DoraUpdate{std::get<LowRankUpdate>(t.update), m};
      if (t.transposed && std::get<LowRankUpdate>(*t.transposed).b.shape[0] == rows)
        t.transposed = DoraUpdate{std::get<LowRankUpdate>(*t.transposed), m};
      else
        t.transposed.reset();
      magnitudes.erase(mit);
    }
    out.targets.push_back(std::move(t));
  }
  if (!magnitudes.empty())
    fail("'", file, "': tensor '", magnitudes.begin()->second, "' is a DoRA magnitude without a .lora_a / .lora_b "
         "pair; expected one beside each pair");
  finalize_targets(out, file);
  return out;
}

}  // namespace graft::adapter::detail

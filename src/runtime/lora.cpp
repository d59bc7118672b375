#include "graft/runtime/lora.h"

#include <sstream>

#include "graft/core/error.h"
#include "graft/model/family.h"
#include "graft/model/model_adapters.h"

namespace graft::runtime {

namespace {

Tensor row_slice(const Tensor& t, int64_t row0, int64_t rows) {
  if (row0 == 0 && rows == t.shape[0]) return t;
  Tensor s = t;
  s.shape = {rows, t.shape[1]};
  s.data = static_cast<const uint8_t*>(t.data) + dtype_bytes(t.dtype, row0 * t.shape[1]);
  return s;
}

// Bᵀ, contiguous, in BF16 when B is BF16 (exact) and F32 otherwise (F16 widens exactly).
Tensor transposed(const Tensor& b) {
  const int64_t rows = b.shape[0], r = b.shape[1];
  std::vector<float> f(static_cast<size_t>(rows * r)), t(static_cast<size_t>(rows * r));
  convert_to_f32(b.dtype, b.data, f.data(), rows * r);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t k = 0; k < r; ++k) t[static_cast<size_t>(k * rows + i)] = f[static_cast<size_t>(i * r + k)];
  const DType dt = b.dtype == DType::BF16 ? DType::BF16 : DType::F32;
  std::vector<uint8_t> bytes(static_cast<size_t>(dtype_bytes(dt, rows * r)));
  convert_from_f32(t.data(), dt, bytes.data(), rows * r);
  return Tensor::owned(dt, {r, rows}, std::move(bytes));
}

// Model tensor name -> (layer, projection) for every projection a term can sit on.
struct Site {
  int64_t layer;
  Projection projection;
};

std::map<std::string, Site> projection_sites(const model::ModelConfig& c) {
  using model::LayerTensor;
  static const std::pair<LayerTensor, Projection> kRoles[] = {
      {LayerTensor::Q, Projection::Q},       {LayerTensor::K, Projection::K},   {LayerTensor::V, Projection::V},
      {LayerTensor::O, Projection::O},       {LayerTensor::Gate, Projection::Gate},
      {LayerTensor::Up, Projection::Up},     {LayerTensor::Down, Projection::Down}};
  std::map<std::string, Site> sites;
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (const auto& [role, p] : kRoles) sites[model::hf_layer_tensor_name(l, role)] = {l, p};
  if (!c.tie_word_embeddings) sites[model::kLmHeadName] = {c.num_layers, Projection::LmHead};
  return sites;
}

}  // namespace

std::shared_ptr<const LoraAdapter> make_lora_adapter(const adapter::WeightAdapterPlan& plan,
                                                     const model::ModelConfig& config, const std::string& path) {
  auto out = std::make_shared<LoraAdapter>();
  out->path = path;
  out->terms.resize(static_cast<size_t>(config.num_layers + 1));
  const auto sites = projection_sites(config);
  std::vector<std::string> problems;
  for (const auto& [tensor, updates] : plan.updates) {
    for (const adapter::PlannedUpdate& pu : updates) {
      const auto* lr = std::get_if<adapter::LowRankUpdate>(pu.update);
      if (!lr) {
        problems.push_back("'" + tensor + "' gets a " + adapter::update_kind(*pu.update) +
                           " update, which has no low-rank form; apply this adapter fused with --adapter");
        continue;
      }
      const Tensor b = row_slice(lr->b, pu.src_row, pu.rows);
      LoraTerm t{lr->a, b, transposed(b), pu.dst_row, lr->scale * pu.strength};
      if (tensor == model::kEmbedName) {
        out->embed.push_back(t);
        // A tied head is the embedding read as a linear layer: the same ΔE changes the logits.
        if (config.tie_word_embeddings)
          out->terms[static_cast<size_t>(config.num_layers)][static_cast<size_t>(Projection::LmHead)].push_back(t);
        ++out->term_count;
        continue;
      }
      auto it = sites.find(tensor);
      if (it == sites.end()) {
        problems.push_back("'" + tensor + "' is not a projection the runtime applies adapter terms to");
        continue;
      }
      out->terms[static_cast<size_t>(it->second.layer)][static_cast<size_t>(it->second.projection)].push_back(t);
      ++out->term_count;
    }
  }
  if (!problems.empty()) {
    std::ostringstream os;
    os << "cannot apply adapter '" << path << "' unfused (" << problems.size() << " problem"
       << (problems.size() > 1 ? "s" : "") << "); no weight was changed:";
    for (const auto& p : problems) os << "\n  - " << p;
    throw Error(os.str());
  }
  return out;
}

std::shared_ptr<const LoraSet> make_lora_set(const model::ModelConfig& config, const io::TensorSource& model_source,
                                             const std::vector<adapter::AdapterUse>& adapters) {
  auto set = std::make_shared<LoraSet>();
  for (const auto& use : adapters) {
    adapter::AdapterUse unit{use.adapter, 1.0f};
    auto plan = model::bind_model_adapters(config, model_source, {unit}, model::AdapterPath::Unfused);
    set->adapters.push_back(make_lora_adapter(*plan, config, use.adapter->path));
  }
  return set;
}

}  // namespace graft::runtime

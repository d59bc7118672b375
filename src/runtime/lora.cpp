#include "graft/runtime/lora.h"

#include <cstring>
#include <sstream>

#include "graft/core/ascii.h"
#include "graft/core/convert.h"
#include "graft/core/error.h"
#include "graft/core/gguf_quantize.h"
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

// The roles a term can sit on: the linear layers the forward pass runs (a layer's projections, the
// head, a sparse layer's router and its experts' projections) and the embedding lookup.
bool takes_terms(model::Role r) {
  using model::Role;
  switch (r) {
    case Role::Q: case Role::K: case Role::V: case Role::O: case Role::Gate: case Role::Up: case Role::Down:
    case Role::Router: case Role::LmHead: case Role::Embed: return true;
    default: return false;
  }
}

// The input width of A of an update with an A factor (LoRA, DoRA, LoHa), else 0 (LoKr keeps its
// factors as stored whatever --lora-dtype says).
int64_t a_width(const adapter::Update& u) {
  if (const auto* lr = std::get_if<adapter::LowRankUpdate>(&u)) return lr->a.shape[1];
  if (const auto* dr = std::get_if<adapter::DoraUpdate>(&u)) return dr->lora.a.shape[1];
  if (const auto* hd = std::get_if<adapter::HadamardUpdate>(&u)) return hd->w1b.shape[1];
  return 0;
}

std::vector<float> f32_all(const Tensor& t) {
  return t.data ? rows_to_f32(t, 0, t.shape.empty() ? 0 : t.shape[0]) : std::vector<float>{};
}

Tensor f32_tensor(const Shape& shape, std::vector<float> v) {
  std::vector<uint8_t> bytes(v.size() * sizeof(float));
  if (!v.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());
  return Tensor::owned(DType::F32, shape, std::move(bytes));
}

std::shared_ptr<const DoraRows> dora_rows(const Tensor& magnitude, int64_t src_row, int64_t rows) {
  auto d = std::make_shared<DoraRows>();
  d->magnitude = rows_to_f32(magnitude, src_row, rows);
  return d;
}

// LoHa as the rank-r1·r2 pair A'[(k,l), i] = w1b[k,i]·w2b[l,i], B'[o,(k,l)] = w1a[o,k]·w2a[o,l]:
// Σ_{k,l} B'[o,(k,l)]·A'[(k,l),i] = (Σ_k w1a[o,k]w1b[k,i])·(Σ_l w2a[o,l]w2b[l,i]), exactly in reals.
LoraTerm hadamard_term(const adapter::HadamardUpdate& h, const adapter::PlannedUpdate& pu) {
  const int64_t r1 = h.w1b.shape[0], r2 = h.w2b.shape[0], in = h.w1b.shape[1], rows = pu.rows;
  const std::vector<float> w1a = rows_to_f32(h.w1a, pu.src_row, rows), w2a = rows_to_f32(h.w2a, pu.src_row, rows);
  const std::vector<float> w1b = f32_all(h.w1b), w2b = f32_all(h.w2b);
  const int64_t r = r1 * r2;
  std::vector<float> a(static_cast<size_t>(r * in)), b(static_cast<size_t>(rows * r));
  for (int64_t k = 0; k < r1; ++k)
    for (int64_t l = 0; l < r2; ++l)
      for (int64_t i = 0; i < in; ++i) a[(k * r2 + l) * in + i] = w1b[k * in + i] * w2b[l * in + i];
  for (int64_t o = 0; o < rows; ++o)
    for (int64_t k = 0; k < r1; ++k)
      for (int64_t l = 0; l < r2; ++l) b[o * r + k * r2 + l] = w1a[o * r1 + k] * w2a[o * r2 + l];
  LoraTerm t;
  t.a = f32_tensor({r, in}, std::move(a));
  t.b = f32_tensor({rows, r}, std::move(b));
  t.bt = transposed(t.b);
  t.row0 = pu.dst_row;
  t.scale = h.scale * pu.strength;
  return t;
}

std::shared_ptr<const KronFactors> kron_factors(const adapter::KroneckerUpdate& k, int64_t src_row, int64_t rows) {
  auto f = std::make_shared<KronFactors>();
  if (k.w1.data) {
    f->p = k.w1.shape[0];
    f->q = k.w1.shape[1];
    f->w1 = f32_all(k.w1);
  } else {
    f->p = k.w1_a.shape[0];
    f->r1 = k.w1_a.shape[1];
    f->q = k.w1_b.shape[1];
    f->w1a = f32_all(k.w1_a);
    f->w1b = f32_all(k.w1_b);
  }
  auto transpose = [](const std::vector<float>& v, int64_t rows, int64_t cols) {
    std::vector<float> t(v.size());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = v[i * cols + j];
    return t;
  };
  if (k.w2.data) {
    f->m = k.w2.shape[0];
    f->n = k.w2.shape[1];
    f->w2t = transpose(f32_all(k.w2), f->m, f->n);
  } else {
    f->m = k.w2_a.shape[0];
    f->r2 = k.w2_a.shape[1];
    f->n = k.w2_b.shape[1];
    f->w2at = transpose(f32_all(k.w2_a), f->m, f->r2);
    f->w2bt = transpose(f32_all(k.w2_b), f->r2, f->n);
  }
  f->src_row = src_row;
  f->rows = rows;
  return f;
}

// A factor [rows, cols] in `dt`: F32/BF16 rounded to nearest even, Q8_0 quantized by llama.cpp's
// reference quantizer (so a factor that came from a Q8_0 GGUF gets its file's bytes back).
Tensor factor_in(const Tensor& f, DType dt) {
  if (f.dtype == dt) return f;
  const int64_t rows = f.shape[0], cols = f.shape[1];  // (Q8_0's whole blocks: check_lora_plan refused the rest)
  const std::vector<float> v = rows_to_f32(f, 0, rows);
  std::vector<uint8_t> bytes(static_cast<size_t>(dtype_bytes(dt, rows * cols)));
  if (dt == DType::Q8_0)
    quantize_gguf_blocks(dt, v.data(), bytes.data(), rows * cols);
  else
    convert_from_f32(v.data(), dt, bytes.data(), rows * cols);
  return Tensor::owned(dt, {rows, cols}, std::move(bytes));
}

}  // namespace

int64_t LoraTerm::factor_bytes() const {
  if (kron) {
    const KronFactors& f = *kron;
    return 4 * static_cast<int64_t>(f.w1.size() + f.w1a.size() + f.w1b.size() + f.w2t.size() + f.w2at.size() +
                                    f.w2bt.size());
  }
  return a.nbytes() + (up_q8 ? up_q8->bytes() : bt.nbytes());
}

int64_t LoraAdapter::factor_bytes() const {
  int64_t bytes = bytes_per_token(1, 1);
  if (const auto* embed = at({model::Role::Embed}))
    for (const LoraTerm& t : *embed) bytes += t.factor_bytes();
  return bytes;
}

int64_t LoraAdapter::bytes_per_token(int64_t active, int64_t experts) const {
  int64_t bytes = 0, expert_bytes = 0;
  for (const auto& [role, site] : terms) {
    if (role.role == model::Role::Embed) continue;  // a lookup reads one row of B
    for (const LoraTerm& t : site) (role.expert < 0 ? bytes : expert_bytes) += t.factor_bytes();
  }
  return bytes + (experts > 0 ? expert_bytes * active / experts : 0);
}

LoraDType parse_lora_dtype(std::string_view name, std::string_view option) {
  const std::string s = ascii_lower(name);
  if (s == "auto") return std::nullopt;
  if (s == "f32") return DType::F32;
  if (s == "bf16") return DType::BF16;
  if (s == "q8_0") return DType::Q8_0;
  fail_as(ErrorKind::kBadRequest, option, ": '", name, "' is not an adapter factor type (allowed: auto, f32, bf16, q8_0)");
}

std::string lora_dtype_name(LoraDType t) {
  if (!t) return "auto";
  switch (*t) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::Q8_0: return "q8_0";
    default: return std::string(dtype_name(*t));
  }
}

void check_lora_plan(const adapter::WeightAdapterPlan& plan, const model::ModelBindings& bindings,
                     const std::string& path, LoraDType factor_dtype) {
  if (factor_dtype && *factor_dtype != DType::F32 && *factor_dtype != DType::BF16 && *factor_dtype != DType::Q8_0)
    fail_as(ErrorKind::kBadRequest, "make_lora_adapter: factor dtype ", dtype_name(*factor_dtype),
            "; expected F32, BF16 or Q8_0");
  std::vector<std::string> problems;
  for (const auto& [tensor, updates] : plan.updates) {
    const model::TensorRole* role = bindings.role(tensor);
    for (const adapter::PlannedUpdate& pu : updates) {
      const std::string kind = adapter::update_kind(*pu.update);
      const bool low_rank = std::holds_alternative<adapter::LowRankUpdate>(*pu.update);
      const bool unfusable = low_rank || std::holds_alternative<adapter::DoraUpdate>(*pu.update) ||
                             std::holds_alternative<adapter::HadamardUpdate>(*pu.update) ||
                             std::holds_alternative<adapter::KroneckerUpdate>(*pu.update);
      if (role && role->role == model::Role::Embed && !low_rank) {
        problems.push_back("'" + tensor + "' gets a " + kind +
                           " update: on the embedding only LoRA runs unfused; apply this adapter fused with --adapter");
      } else if (!unfusable) {
        problems.push_back("'" + tensor + "' gets a " + kind +
                           " update, which has no unfused form; apply this adapter fused with --adapter");
      } else if (!role || !takes_terms(role->role)) {
        problems.push_back("'" + tensor + "' is not a projection the runtime applies adapter terms to");
      } else if (factor_dtype == DType::Q8_0 && role->role != model::Role::Embed && a_width(*pu.update) % 32 != 0) {
        fail_as(ErrorKind::kBadRequest, "--lora-dtype q8_0: adapter '", path, "', the term on '", tensor,
                "': A [r, in] has rows of ", a_width(*pu.update),
                " values; Q8_0 needs a multiple of 32 (use --lora-dtype bf16 or auto)");
      }
    }
  }
  if (!problems.empty()) {
    std::ostringstream os;
    os << "cannot apply adapter '" << path << "' unfused (" << problems.size() << " problem"
       << (problems.size() > 1 ? "s" : "") << "); no weight was changed:";
    for (const auto& p : problems) os << "\n  - " << p;
    throw Error(os.str());
  }
}

namespace {

// The term of one planned update (its factors as stored, the adapter's own scale).
LoraTerm make_term(const adapter::PlannedUpdate& pu) {
  LoraTerm t;
  t.row0 = pu.dst_row;
  if (const auto* lr = std::get_if<adapter::LowRankUpdate>(pu.update)) {
    t.a = lr->a;
    t.b = row_slice(lr->b, pu.src_row, pu.rows);
    t.bt = transposed(t.b);
    t.scale = lr->scale * pu.strength;
  } else if (const auto* dr = std::get_if<adapter::DoraUpdate>(pu.update)) {
    t.a = dr->lora.a;
    t.b = row_slice(dr->lora.b, pu.src_row, pu.rows);
    t.bt = transposed(t.b);
    t.scale = dr->lora.scale * pu.strength;
    t.dora = dora_rows(dr->magnitude, pu.src_row, pu.rows);
  } else if (const auto* hd = std::get_if<adapter::HadamardUpdate>(pu.update)) {
    t = hadamard_term(*hd, pu);
  } else if (const auto* kr = std::get_if<adapter::KroneckerUpdate>(pu.update)) {
    t.scale = kr->scale * pu.strength;
    t.kron = kron_factors(*kr, pu.src_row, pu.rows);
  }
  if (!t.kron) t.down = model::Matrix::of(t.a);
  return t;
}

// The factors of a projection's term in the --lora-dtype asked for (check_lora_plan checked Q8_0's width).
void convert_factors(LoraTerm& t, DType dt) {
  if (t.kron) return;
  t.a = factor_in(t.a, dt);
  if (dt == DType::Q8_0) {
    const int64_t rows = t.b.shape[0], r = t.b.shape[1];
    t.up_q8 = std::make_shared<const compute::UpQ8>(compute::quantize_up_q8(rows_to_f32(t.b, 0, rows).data(), rows, r));
    t.bt = Tensor();
    t.down = model::Matrix::of(t.a);
    compute::prepare_weight(t.down, nullptr, compute::Activations::Q8);  // interleaved where the CPU runs it
  } else {
    t.bt = factor_in(t.bt, dt);
  }
}

}  // namespace

std::shared_ptr<const LoraAdapter> make_lora_adapter(const adapter::WeightAdapterPlan& plan,
                                                     const model::ModelBindings& bindings,
                                                     const model::ModelConfig& config, const std::string& path,
                                                     LoraDType factor_dtype) {
  check_lora_plan(plan, bindings, path, factor_dtype);
  auto out = std::make_shared<LoraAdapter>();
  out->path = path;
  out->model_layers = config.num_layers;
  for (const auto& [tensor, updates] : plan.updates) {
    const model::TensorRole role = *bindings.role(tensor);
    for (const adapter::PlannedUpdate& pu : updates) {
      LoraTerm t = make_term(pu);
      ++out->term_count;
      if (role.role == model::Role::Embed) {
        out->terms[role].push_back(t);  // the lookup's terms stay as stored
        // A tied head is the embedding read as a linear layer: the same ΔE changes the logits.
        if (config.tie_word_embeddings) out->terms[{model::Role::LmHead}].push_back(t);
        continue;
      }
      if (factor_dtype) convert_factors(t, *factor_dtype);
      out->terms[role].push_back(std::move(t));
    }
  }
  return out;
}

std::shared_ptr<adapter::WeightAdapterPlan> bind_lora_adapter(const model::ModelConfig& config,
                                                              const io::TensorSource& model_source,
                                                              const model::ModelBindings& bindings,
                                                              std::shared_ptr<const adapter::WeightAdapter> adapter) {
  return model::bind_model_adapters(config, model_source, bindings, {{std::move(adapter), 1.0f}},
                                    model::AdapterPath::Unfused);
}

std::shared_ptr<const LoraAdapter> build_lora_adapter(const model::ModelConfig& config,
                                                      const io::TensorSource& model_source,
                                                      const model::ModelBindings& bindings,
                                                      std::shared_ptr<const adapter::WeightAdapter> adapter,
                                                      LoraDType factor_dtype) {
  const std::string path = adapter->path;
  auto plan = bind_lora_adapter(config, model_source, bindings, std::move(adapter));
  return make_lora_adapter(*plan, bindings, config, path, factor_dtype);
}

}  // namespace graft::runtime

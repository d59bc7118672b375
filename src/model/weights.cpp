#include "graft/model/weights.h"

#include <cstring>
#include <utility>
#include <regex>
#include <set>
#include <sstream>

#include "graft/core/convert.h"
#include "graft/core/error.h"
#include "graft/core/finite.h"
#include "graft/core/huge_pages.h"
#include "graft/core/gguf_quantize.h"
#include "graft/model/family.h"
#include "graft/model/quantized_source.h"

namespace graft::model {

namespace {

struct Loader {
  const io::TensorSource& source;
  std::vector<std::string> problems;
  std::set<std::string> used;

  bool check(const std::string& name, const Shape& expect, bool matrix) {
    used.insert(name);
    auto info = source.info(name);
    if (!info) {
      problems.push_back("missing tensor '" + name + "' (expected " + shape_str(expect) + ")");
      return false;
    }
    if (info->shape != expect) {
      problems.push_back("tensor '" + name + "' has shape " + shape_str(info->shape) + ", expected " +
                         shape_str(expect) + " from config.json");
      return false;
    }
    const DType t = info->dtype;
    // GGUF block formats are kept as stored for matrices (the kernels read them in place).
    if (t != DType::F32 && t != DType::F16 && t != DType::BF16 && !(matrix && dtype_is_quantized(t))) {
      problems.push_back("tensor '" + name + "' has dtype " + std::string(dtype_name(t)) +
                         (matrix ? ", expected F32, F16, BF16 or a GGUF block format" : ", expected F32, F16 or BF16"));
      return false;
    }
    return true;
  }
};

// On huge pages (core/huge_pages.h): decode streams these.
Tensor owned_copy(const Tensor& t) {
  std::shared_ptr<uint8_t[]> buf = huge_page_buffer(static_cast<size_t>(t.nbytes()));
  std::memcpy(buf.get(), t.data, static_cast<size_t>(t.nbytes()));
  return Tensor{t.dtype, t.shape, buf.get(), std::shared_ptr<const void>(buf, buf.get())};
}

// The affine kernels take 4-bit rows in whole 64-code blocks; a narrower row (a tiny model's expert
// of width 32) runs from its exact F32 dequantization, x · dequant(W)ᵀ, as mlx computes it.
Matrix affine_matrix(AffineQuantized q) {
  if (q.bits == 4 && q.cols % 64 != 0) return Matrix::of(dequantize_affine(q));
  return Matrix::of(std::move(q));
}

// A fused matrix of a GGUF block base, merged in F32, as Q8_0 (llama-quantize's reference rounding).
Tensor requantized_q8_0(const Tensor& merged) {
  const Tensor f32 = to_f32(merged);
  std::vector<uint8_t> bytes(static_cast<size_t>(dtype_bytes(DType::Q8_0, f32.numel())));
  quantize_gguf_blocks(DType::Q8_0, f32.as<float>(), bytes.data(), f32.numel());
  return Tensor::owned(DType::Q8_0, f32.shape, std::move(bytes));
}

Matrix read_matrix_stored(const io::TensorSource& s, const std::string& name, const WeightLoadOptions& o) {
  if (o.requantize_blocks.count(name)) return Matrix::of(requantized_q8_0(s.read(name)));
  if (o.quantized && o.quantized->is_quantized(name) && !o.dense.count(name)) {
    if (!o.requantize.count(name)) return affine_matrix(o.quantized->quantized(name));
    const QuantSpec spec = o.quantized->spec(name);
    return affine_matrix(quantize_affine(s.read(name), kRequantizeBits, spec.group_size, o.requantize_scale_dtype));
  }
  Tensor t = s.read(name);
  if (o.weight_dtype) t = convert_tensor(t, *o.weight_dtype);
  if (o.quantize && t.shape.size() == 2 && t.shape[1] % o.quantize->group_size == 0)
    return affine_matrix(quantize_affine(t, o.quantize->bits, o.quantize->group_size,
                                         dtype_is_quantized(t.dtype) ? DType::F32 : t.dtype));
  return Matrix::of(t);
}

// Refuses a weight holding NaN or ±inf, naming the file, the tensor and the element (why:
// graft/core/finite.h). Checked where each tensor is read, after any fused adapter is merged in.
void require_finite(const io::TensorSource& s, const std::string& name, const Tensor& t, ThreadPool* pool,
                    const char* part = "") {
  const int64_t i = first_non_finite(t, pool);
  if (i >= 0)
    fail_as(ErrorKind::kBadInput, s.describe(), ": tensor '", name, "'", part, " holds a non-finite value (NaN or ",
            "infinity) at element ", i, "; a model weight must be a finite number");
}
void require_finite(const io::TensorSource& s, const std::string& name, const Matrix& m, ThreadPool* pool) {
  if (!m.quantized()) return require_finite(s, name, m.dense, pool);
  require_finite(s, name, m.quant.scales, pool, " (scales)");
  require_finite(s, name, m.quant.biases, pool, " (biases)");
}

// With copy_weights, every matrix still backed by the source's storage gets its own memory and the
// source may drop its pages: anonymous memory streams faster at decode (huge pages, fewer TLB
// misses) than a 4 KiB-page file mapping.
Matrix read_matrix(const io::TensorSource& s, const std::string& name, const WeightLoadOptions& o) {
  Matrix m = read_matrix_stored(s, name, o);
  require_finite(s, name, m, o.pool);
  if (!o.copy_weights) return m;
  if (m.quantized()) {
    m.quant.packed = owned_copy(m.quant.packed);
    m.quant.scales = owned_copy(m.quant.scales);
    m.quant.biases = owned_copy(m.quant.biases);
  } else if (m.dense.data == s.read(name).data) {
    m.dense = owned_copy(m.dense);
  }
  s.release(name);
  return m;
}

Tensor read_vector_f32(const io::TensorSource& s, const std::string& name, float offset = 0.0f) {
  Tensor t = to_f32(s.read(name));
  require_finite(s, name, t, nullptr);
  if (offset != 0.0f) {  // Gemma's (1 + w), added in F32 as transformers does
    Tensor o = Tensor::zeros_f32(t.shape);
    for (int64_t i = 0; i < t.numel(); ++i) o.mutable_as<float>()[i] = t.as<float>()[i] + offset;
    return o;
  }
  return t;
}

// Tensors some checkpoints carry that hold no weights the model needs (recomputed buffers).
bool ignorable(const std::string& name) {
  static const std::regex kIgnorable(R"(model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq)");
  return std::regex_match(name, kIgnorable);
}

bool same_matrix(const Matrix& a, const Matrix& b) {
  auto same = [](const Tensor& x, const Tensor& y) {
    return x.dtype == y.dtype && x.shape == y.shape &&
           (x.data == y.data || std::memcmp(x.data, y.data, static_cast<size_t>(x.nbytes())) == 0);
  };
  if (a.quantized() != b.quantized()) return false;
  if (!a.quantized()) return same(a.dense, b.dense);
  return a.quant.bits == b.quant.bits && a.quant.group_size == b.quant.group_size && same(a.quant.packed, b.quant.packed) &&
         same(a.quant.scales, b.quant.scales) && same(a.quant.biases, b.quant.biases);
}

}  // namespace

std::vector<const Matrix*> LayerWeights::matrices() const {
  std::vector<const Matrix*> out = {&q, &k, &v, &o};
  if (experts.empty()) {
    out.insert(out.end(), {&gate, &up, &down});
  } else {
    out.push_back(&router);
    for (const ExpertWeights& e : experts) out.insert(out.end(), {&e.gate, &e.up, &e.down});
  }
  return out;
}

std::vector<Matrix*> LayerWeights::matrices() {
  std::vector<Matrix*> out;
  for (const Matrix* m : std::as_const(*this).matrices()) out.push_back(const_cast<Matrix*>(m));
  return out;
}

int64_t LayerWeights::bytes_per_token(int64_t active) const {
  int64_t bytes = q.nbytes() + k.nbytes() + v.nbytes() + o.nbytes();
  if (experts.empty()) return bytes + gate.nbytes() + up.nbytes() + down.nbytes();
  int64_t all = 0;
  for (const ExpertWeights& e : experts) all += e.gate.nbytes() + e.up.nbytes() + e.down.nbytes();
  return bytes + router.nbytes() + all * active / static_cast<int64_t>(experts.size());
}

const Matrix* ModelWeights::matrix(const TensorRole& r) const {
  if (r.role == Role::Embed) return &embed;
  if (r.role == Role::LmHead) return &lm_head;
  if (r.layer < 0 || r.layer >= static_cast<int64_t>(layers.size())) return nullptr;
  const LayerWeights& L = layers[static_cast<size_t>(r.layer)];
  if (r.expert >= 0) {
    if (r.expert >= static_cast<int64_t>(L.experts.size())) return nullptr;
    const ExpertWeights& X = L.experts[static_cast<size_t>(r.expert)];
    return r.role == Role::Gate ? &X.gate : r.role == Role::Up ? &X.up : r.role == Role::Down ? &X.down : nullptr;
  }
  switch (r.role) {
    case Role::Q: return &L.q;
    case Role::K: return &L.k;
    case Role::V: return &L.v;
    case Role::O: return &L.o;
    case Role::Gate: return &L.gate;
    case Role::Up: return &L.up;
    case Role::Down: return &L.down;
    case Role::Router: return &L.router;
    default: return nullptr;
  }
}

ModelWeights load_weights(const ModelConfig& c, const io::TensorSource& source, const WeightLoadOptions& options) {
  const auto& progress = options.progress;
  const auto& weight_dtype = options.weight_dtype;
  if (weight_dtype && *weight_dtype != DType::F32 && *weight_dtype != DType::F16 && *weight_dtype != DType::BF16)
    fail("weight dtype must be F32, F16 or BF16, not ", dtype_name(*weight_dtype));
  Loader ld{source, {}, {}};
  for (const auto& [name, role] : tensor_roles(c)) ld.check(name, tensor_shape(c, role), role.role != Role::FinalNorm);
  const bool has_head = source.has(kLmHeadName);
  // A tied checkpoint that also stores lm_head: transformers would ignore it; graft accepts it only
  // when it is the embedding itself, so a silently different head cannot be lost.
  if (c.tie_word_embeddings && has_head) ld.used.insert(kLmHeadName);
  for (const auto& name : source.names())
    if (!ld.used.count(name) && !ignorable(name))
      ld.problems.push_back("unexpected tensor '" + name + "' (not part of a " + c.model_type + " model with " +
                            std::to_string(c.num_layers) + " layers under this config)");
  if (!ld.problems.empty()) {
    std::ostringstream os;
    os << "model weights in " << source.describe() << " do not match the config (" << ld.problems.size()
       << " problem" << (ld.problems.size() > 1 ? "s" : "") << "):";
    for (const auto& p : ld.problems) os << "\n  - " << p;
    throw Error(os.str());
  }

  const int64_t total = 3 + c.num_layers;
  int64_t done = 0;
  auto tick = [&] { if (progress) progress(++done, total); };
  ModelWeights w;
  w.embed = read_matrix(source, kEmbedName, options);
  tick();
  const float off = c.norm_weight_offset;
  w.final_norm = read_vector_f32(source, kFinalNormName, off);
  tick();
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed;
    if (has_head && !same_matrix(read_matrix(source, kLmHeadName, options), w.embed))
      fail(source.describe(), ": tie_word_embeddings is true but lm_head.weight differs from the embedding");
  } else {
    w.lm_head = read_matrix(source, kLmHeadName, options);
  }
  tick();
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights L;
    auto name = [&](Role r) { return hf_layer_tensor_name(c, i, r); };
    L.attn_norm = read_vector_f32(source, name(Role::AttnNorm), off);
    L.q = read_matrix(source, name(Role::Q), options);
    L.k = read_matrix(source, name(Role::K), options);
    L.v = read_matrix(source, name(Role::V), options);
    L.o = read_matrix(source, name(Role::O), options);
    if (c.attention_bias) {
      L.q_bias = read_vector_f32(source, name(Role::QBias));
      L.k_bias = read_vector_f32(source, name(Role::KBias));
      L.v_bias = read_vector_f32(source, name(Role::VBias));
    }
    if (c.qk_norm) {
      L.q_norm = read_vector_f32(source, name(Role::QNorm), off);
      L.k_norm = read_vector_f32(source, name(Role::KNorm), off);
    }
    L.mlp_norm = read_vector_f32(source, name(Role::MlpNorm), off);
    if (c.sandwich_norms) {
      L.attn_post_norm = read_vector_f32(source, name(Role::AttnPostNorm), off);
      L.mlp_post_norm = read_vector_f32(source, name(Role::MlpPostNorm), off);
    }
    if (c.layer_is_sparse(i)) {
      L.router = read_matrix(source, hf_router_tensor_name(c, i), options);
      for (int64_t e = 0; e < c.num_experts; ++e) {
        auto expert = [&](Role r) { return read_matrix(source, hf_expert_tensor_name(c, i, e, r), options); };
        L.experts.push_back({expert(Role::Gate), expert(Role::Up), expert(Role::Down)});
      }
    } else {
      L.gate = read_matrix(source, name(Role::Gate), options);
      L.up = read_matrix(source, name(Role::Up), options);
      L.down = read_matrix(source, name(Role::Down), options);
    }
    w.layers.push_back(std::move(L));
    tick();
  }
  return w;
}

}  // namespace graft::model

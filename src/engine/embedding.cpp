#include "graft/engine/embedding.h"

#include <algorithm>
#include <cmath>

#include "graft/core/error.h"

namespace graft::engine {

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::None: return "none";
    case Pooling::Mean: return "mean";
    case Pooling::Cls: return "cls";
    case Pooling::Last: return "last";
  }
  return "none";
}

std::optional<Pooling> parse_pooling(std::string_view name) {
  for (Pooling p : {Pooling::None, Pooling::Mean, Pooling::Cls, Pooling::Last})
    if (name == pooling_name(p)) return p;
  return std::nullopt;
}

Pooling default_pooling(const model::ModelConfig& config) {
  if (!config.pooling_type) return Pooling::Last;
  switch (*config.pooling_type) {  // llama.cpp's enum llama_pooling_type
    case 0: return Pooling::None;
    case 1: return Pooling::Mean;
    case 2: return Pooling::Cls;
    case 3: return Pooling::Last;
    case 4:
      fail_as(ErrorKind::kUnsupported, "the model declares pooling_type rank (a reranker); graft has no /reranking: "
                                       "pass --pooling none|mean|cls|last");
    default:
      fail_as(ErrorKind::kUnsupported, "the model declares pooling_type ", *config.pooling_type,
              ", which is not one of llama.cpp's 0..4; pass --pooling none|mean|cls|last");
  }
}

std::vector<float> pool_rows(std::span<const float> rows, int64_t dim, Pooling pooling) {
  if (dim <= 0 || rows.empty() || rows.size() % static_cast<size_t>(dim) != 0)
    fail_as(ErrorKind::kInternal, "pool_rows: ", rows.size(), " values are not whole rows of ", dim);
  const size_t n = rows.size() / static_cast<size_t>(dim), d = static_cast<size_t>(dim);
  switch (pooling) {
    case Pooling::None: return {rows.begin(), rows.end()};
    case Pooling::Cls: return {rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(d)};
    case Pooling::Last: return {rows.end() - static_cast<std::ptrdiff_t>(d), rows.end()};
    case Pooling::Mean: break;
  }
  std::vector<double> sum(d, 0.0);
  for (size_t r = 0; r < n; ++r)
    for (size_t c = 0; c < d; ++c) sum[c] += rows[r * d + c];
  std::vector<float> out(d);
  for (size_t c = 0; c < d; ++c) out[c] = static_cast<float>(sum[c] / static_cast<double>(n));
  return out;
}

void normalize_embedding(std::span<float> v, int mode) {
  if (mode < -1) fail_as(ErrorKind::kBadRequest, "field 'embd_normalize' must be >= -1, got ", mode);
  if (mode == -1) return;
  double norm = 0;
  if (mode == 0) {
    for (float x : v) norm = std::max(norm, std::fabs(static_cast<double>(x)));
    norm /= 32760.0;
  } else if (mode == 1) {
    for (float x : v) norm += std::fabs(static_cast<double>(x));
  } else if (mode == 2) {
    for (float x : v) norm += static_cast<double>(x) * x;
    norm = std::sqrt(norm);
  } else {
    for (float x : v) norm += std::pow(std::fabs(static_cast<double>(x)), mode);
    norm = std::pow(norm, 1.0 / mode);
  }
  const double scale = norm > 0 ? 1.0 / norm : 0.0;
  for (float& x : v) x = static_cast<float>(x * scale);
}

}  // namespace graft::engine

#include "runtime/adapted_matmul.h"

#include <memory>

namespace graft::runtime {

void matmul_adapted(ThreadPool& pool, const float* x, int64_t m, std::span<const AdaptedTarget> targets,
                    std::span<const RowDowns> downs) {
  std::vector<std::unique_ptr<TermsDown>> parts;  // one per RowDowns: its scales (DoRA's factors)
  std::vector<compute::MatmulTarget> first;
  for (const RowDowns& d : downs) {
    parts.push_back(std::make_unique<TermsDown>(pool, d.terms, d.x && d.m >= 0 ? d.m : m, *d.scales, d.x));
    first.insert(first.end(), parts.back()->targets().begin(), parts.back()->targets().end());
  }
  std::vector<compute::ColumnEpilogue> epilogues(targets.size());
  std::vector<compute::MatmulTarget> mm(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    const AdaptedTarget& t = targets[i];
    const bool has_bias = t.bias && t.bias->data;
    bool any_dora = false;
    for (const TermUp& u : t.ups) any_dora = any_dora || u.term->dora;
    mm[i] = {t.w, t.y, nullptr, t.x, t.m};
    const int64_t rows = mm[i].rows(m);
    epilogues[i] = [&t, rows, has_bias, any_dora](int64_t j0, int64_t j1) {
      const int64_t out = t.w->rows;
      auto add_bias = [&] {
        const float* b = t.bias->as<float>();
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = j0; j < j1; ++j) t.y[r * out + j] += b[j];
      };
      if (has_bias && !any_dora) add_bias();
      for (const TermUp& u : t.ups) {
        const int64_t width = u.term->low_width();
        for (int64_t r = 0; r < u.n; ++r)
          lora_term_up(*u.term, u.low + r * width, u.scales[r], j0, j1, t.y + (u.rows ? u.rows[r] : r) * out);
      }
      if (has_bias && any_dora) add_bias();
    };
    if (has_bias || !t.ups.empty()) mm[i].epilogue = &epilogues[i];
  }
  if (parts.empty())
    compute::matmul_many(pool, x, m, mm);
  else
    compute::matmul_many(pool, x, m, mm, first, [&] {
      for (const auto& p : parts) p->finish();
    });
}

}  // namespace graft::runtime

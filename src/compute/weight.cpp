// matmul() on a Weight (dispatch by format: dense, GGUF blocks as stored or interleaved, mlx
// affine), matmul_many, and preparing a weight for the CPU's kernels.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "graft/compute/weight.h"
#include "graft/core/error.h"
#include "graft/compute/bf16_dot.h"
#include "compute/interleaved_blocks.h"
#include "compute/matmul_internal.h"
#include "compute/matmul_q8.h"

namespace graft::compute {

namespace {
// Columns per parallel_for unit when a call includes interleaved weights: one 16-row group.
constexpr int64_t kGroupCols = 16;
// Chunks per thread of a quantized matmul (ThreadPool::parallel_for): claimed as threads finish, so
// a thread slowed by other work on its core does not hold the others at the end of every matmul
// (3B Q4_K_M decode at 2 threads in a 2-core VM; see docs/PERFORMANCE.md). Output bits do not
// depend on the cut.
constexpr int kChunksPerThread = 4;
}  // namespace

WeightKind Weight::kind() const {
  if (interleaved) return quantized() ? WeightKind::InterleavedAffine : WeightKind::InterleavedBlocks;
  if (quantized()) return WeightKind::Affine;
  if (bf16_activations) return WeightKind::Bf16Dot;
  if (dtype_is_quantized(dense.dtype)) return f32_activations ? WeightKind::BlocksF32 : WeightKind::Blocks;
  return WeightKind::Dense;
}

bool rounds_activations(WeightKind k) {
  return k == WeightKind::Bf16Dot || k == WeightKind::Blocks || k == WeightKind::InterleavedBlocks ||
         k == WeightKind::InterleavedAffine;
}

std::string describe_kernels(std::span<const WeightKind> kinds) {
  auto has = [&](WeightKind k) { return std::find(kinds.begin(), kinds.end(), k) != kinds.end(); };
  std::string s;
  if (has(WeightKind::Dense)) s += std::string(" dense ") + matmul_isa();
  if (has(WeightKind::Bf16Dot)) s += " bf16-dot bf16-activations avx512bf16 (vdpbf16ps)";
  if (has(WeightKind::Blocks) || has(WeightKind::InterleavedBlocks))
    s += std::string(" gguf-blocks q8-activations ") + matmul_q8_kernel();
  if (has(WeightKind::BlocksF32)) s += std::string(" gguf-blocks f32-activations (dequantized per tile) ") + matmul_isa();
  if (has(WeightKind::InterleavedBlocks)) s += " (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K rows interleaved x16)";
  if (has(WeightKind::InterleavedAffine))
    s += std::string(" mlx-affine q8-activations ") + matmul_q8_kernel() + " (affine 4/8-bit rows interleaved x16)";
  if (has(WeightKind::Affine)) s += " mlx-affine f32-activations avx2";
  return s;
}

namespace {

// An interleaved weight (GGUF blocks or mlx affine codes) on the integer kernel for this CPU.
void matmul_interleaved(ThreadPool& pool, const float* x, int64_t m, const InterleavedBlocks& b, float* y,
                        bool accumulate, const ColumnEpilogue* epilogue) {
  if (m == 0 || b.n == 0) return;
  if (!x || !y) fail("matmul: null x or output pointer");
  detail::Q8Activations act;
  detail::quantize_activations(x, m, b.k, act, &pool);
  const detail::Q8Kernel q8 = detail::best_q8_kernel();
  detail::prepare_interleaved(act, q8, &pool);
  const int64_t grain = std::max<int64_t>(1, detail::kMinChunkWork / std::max<int64_t>(1, m * b.k * kGroupCols));
  pool.parallel_for(
      b.groups(),
      [&](int64_t g0, int64_t g1) {
        const int64_t j0 = g0 * kGroupCols, j1 = std::min(b.n, g1 * kGroupCols);
        detail::interleaved_cols(b, act, y, b.n, accumulate, j0, j1, q8);
        if (epilogue) (*epilogue)(j0, j1);
      },
      grain, kChunksPerThread);
}

}  // namespace

void matmul(ThreadPool& pool, const float* x, int64_t m, const Weight& w, float* y, bool accumulate,
            const ColumnEpilogue* epilogue) {
  switch (w.kind()) {
    case WeightKind::InterleavedBlocks:
    case WeightKind::InterleavedAffine: return matmul_interleaved(pool, x, m, *w.interleaved, y, accumulate, epilogue);
    case WeightKind::Affine: return matmul_affine(pool, x, m, w.cols, w.quant, y, accumulate, epilogue);
    case WeightKind::Bf16Dot: return matmul_bf16_dot(pool, x, m, w.cols, w.dense, y, accumulate, epilogue);
    case WeightKind::BlocksF32: return matmul_f32_activations(pool, x, m, w.cols, w.dense, y, accumulate, epilogue);
    case WeightKind::Blocks:
    case WeightKind::Dense: return matmul(pool, x, m, w.cols, w.dense, y, accumulate, epilogue);
  }
}

namespace {
// One input of a matmul_many call (the shared x, or a target's own) and the forms of it its
// targets' kernels read, each made once: 8-bit blocks (GGUF blocks as stored and interleaved
// copies share them) and BF16-rounded rows.
struct ManyInput {
  const float* x = nullptr;
  int64_t m = 0, k = 0;
  std::vector<DType> block_types;  // of the GGUF block weights read as stored
  bool any_blocks = false, any_interleaved = false, any_bf16 = false;
  detail::Q8Activations act;
  Bf16Rows bf16_x;
};
}  // namespace

void matmul_many(ThreadPool& pool, const float* x, int64_t m, std::span<const MatmulTarget> main_targets,
                 std::span<const MatmulTarget> first, const std::function<void()>& after_first) {
  if (first.empty() && main_targets.size() == 1) {
    const MatmulTarget& t = main_targets[0];
    return matmul(pool, t.input(x), t.rows(m), *t.w, t.y, false, t.epilogue);
  }
  std::vector<MatmulTarget> targets;  // those with rows: the first, then the main
  for (const MatmulTarget& t : first)
    if (t.rows(m) > 0) targets.push_back(t);
  const size_t n_first = targets.size();
  for (const MatmulTarget& t : main_targets)
    if (t.rows(m) > 0) targets.push_back(t);
  if (targets.empty()) return;
  // Each target's input and preparation, and its first column in the concatenated column space
  // (the main targets from a multiple of 16, so no unit holds columns of both kinds).
  std::vector<ManyInput> inputs;
  std::vector<size_t> input_of(targets.size());
  std::vector<AffinePrepared> affine(targets.size());
  std::vector<WeightKind> kinds(targets.size());
  std::vector<int64_t> start(targets.size() + 1, 0);
  for (size_t i = 0; i < targets.size(); ++i) {
    const Weight& w = *targets[i].w;
    const float* xi = targets[i].input(x);
    const int64_t mi = targets[i].rows(m);
    size_t at = 0;
    while (at < inputs.size() && (inputs[at].x != xi || inputs[at].m != mi)) ++at;
    if (at == inputs.size()) {
      inputs.emplace_back();
      inputs.back().x = xi;
      inputs.back().m = mi;
      inputs.back().k = w.cols;
    }
    ManyInput& in = inputs[input_of[i] = at];
    if (w.cols != in.k) fail_as(ErrorKind::kInternal, "matmul_many: targets of ", in.k, " and ", w.cols, " columns on one input");
    if (i < n_first && targets[i].epilogue) fail_as(ErrorKind::kInternal, "matmul_many: a first target with an epilogue");
    switch (kinds[i] = w.kind()) {
      case WeightKind::InterleavedBlocks:
      case WeightKind::InterleavedAffine: in.any_blocks = in.any_interleaved = true; break;  // the same int8 activations
      case WeightKind::Affine: affine[i] = prepare_affine(xi, mi, w.cols, w.quant); break;
      case WeightKind::Blocks:
        in.any_blocks = true;
        in.block_types.push_back(w.dense.dtype);
        break;
      case WeightKind::Bf16Dot:
        if (w.dense.dtype != DType::BF16)
          fail_as(ErrorKind::kInternal, "matmul_many: bf16 activations on a ", dtype_name(w.dense.dtype), " matrix");
        in.any_bf16 = true;
        [[fallthrough]];
      case WeightKind::Dense:
      case WeightKind::BlocksF32: detail::check_matmul_args("matmul", xi, mi, w.cols, w.dense, targets[i].y); break;
    }
    start[i + 1] = start[i] + w.rows;
    if (i + 1 == n_first) start[i + 1] = (start[i + 1] + kGroupCols - 1) / kGroupCols * kGroupCols;
  }
  const detail::Q8Kernel q8 = detail::best_q8_kernel();
  int64_t mk = 0;  // the largest input, for the chunk grain
  for (const ManyInput& in : inputs) mk = std::max(mk, in.m * in.k);
  // One input: its preparation shares out its rows; several (each expert's rows): the inputs are
  // shared out, each prepared on one thread (a dispatch each would cost more than the work).
  auto prepare = [&](ManyInput& in, ThreadPool* on) {
    if (in.any_blocks) detail::prepare_blocks(on, q8, in.x, in.m, in.k, in.block_types, in.act);
    if (in.any_interleaved) detail::prepare_interleaved(in.act, q8, on);
    if (in.any_bf16) round_rows_bf16(in.x, in.m, in.k, in.bf16_x, on);
  };
  if (inputs.size() == 1)
    prepare(inputs[0], &pool);
  else
    pool.parallel_for(static_cast<int64_t>(inputs.size()), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) prepare(inputs[static_cast<size_t>(i)], nullptr);
    });
  const detail::Isa isa = detail::best_isa();
  // Columns [g0, g1) of the concatenated space, each target's epilogue on its own columns: both
  // (kernel then epilogue, target by target), or only the kernels, or only the epilogues.
  enum Pass { kBoth, kKernels, kEpilogues };
  auto run_cols = [&](int64_t g0, int64_t g1, Pass pass = kBoth) {
    for (size_t i = 0; i < targets.size(); ++i) {
      const Weight& w = *targets[i].w;
      const int64_t j0 = std::max(g0, start[i]) - start[i], j1 = std::min(g1, start[i] + w.rows) - start[i];
      if (j0 >= j1) continue;
      if (pass == kEpilogues) {
        if (targets[i].epilogue) (*targets[i].epilogue)(j0, j1);
        continue;
      }
      const ManyInput& in = inputs[input_of[i]];
      switch (kinds[i]) {
        case WeightKind::InterleavedBlocks:
        case WeightKind::InterleavedAffine:
          detail::interleaved_cols(*w.interleaved, in.act, targets[i].y, w.rows, false, j0, j1, q8);
          break;
        case WeightKind::Affine: affine_cols(affine[i], w.quant, targets[i].y, false, j0, j1); break;
        case WeightKind::Blocks: detail::blocks_cols(q8, in.act, w.dense, targets[i].y, false, j0, j1); break;
        case WeightKind::Bf16Dot: bf16_dot_cols(in.bf16_x, w.dense, targets[i].y, false, j0, j1); break;
        case WeightKind::Dense:
        case WeightKind::BlocksF32:
          detail::matmul_cols(isa, {in.x, in.m, in.k, w.rows, w.dense.data, w.dense.dtype, targets[i].y, false}, j0, j1);
          break;
      }
      if (pass == kBoth && targets[i].epilogue) (*targets[i].epilogue)(j0, j1);
    }
  };
  // Units of 16 columns: a cut never splits an interleaved group (targets start at multiples of 16
  // in practice; a group cut anyway is computed twice, with the same bits). The first targets'
  // units are claimed one at a time from a shared counter by whichever threads run, and every chunk
  // waits until all of them are done (and after_first has run) before its epilogues: a thread
  // only waits on units already claimed by a running thread, so it cannot wait forever even when
  // one thread runs every chunk. The main targets' kernels do not read the first targets, so a
  // chunk that would wait runs its kernels first and its epilogues after the wait: with one first
  // unit (a decode step's single adapter term on o_proj or an expert's down_proj) the other threads
  // then work instead of spinning while one thread computes it. Same bits: each column's kernel,
  // then its epilogue, as before.
  const int64_t first_end = start[n_first], first_units = first_end / kGroupCols;
  const int64_t units = (start.back() - first_end + kGroupCols - 1) / kGroupCols;
  const int64_t grain = std::max<int64_t>(1, detail::kMinChunkWork / std::max<int64_t>(1, mk * kGroupCols));
  std::atomic<int64_t> next{0}, done{0};
  std::atomic<bool> ready{first_units == 0};
  std::exception_ptr first_error;
  if (first_units == 0 && after_first) after_first();
  pool.parallel_for(
      std::max<int64_t>(units, 1),
      [&](int64_t u0, int64_t u1) {
        for (int64_t u; (u = next.fetch_add(1, std::memory_order_relaxed)) < first_units;) {
          run_cols(u * kGroupCols, std::min(first_end, (u + 1) * kGroupCols));
          if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == first_units) {
            try {
              if (after_first) after_first();
            } catch (...) {
              first_error = std::current_exception();
            }
            ready.store(true, std::memory_order_release);
          }
        }
        const int64_t c0 = first_end + u0 * kGroupCols, c1 = std::min(start.back(), first_end + u1 * kGroupCols);
        if (ready.load(std::memory_order_acquire)) return run_cols(c0, c1);
        run_cols(c0, c1, kKernels);
        while (!ready.load(std::memory_order_acquire)) _mm_pause();
        run_cols(c0, c1, kEpilogues);
      },
      grain, kChunksPerThread);
  if (first_error) std::rethrow_exception(first_error);
}

Activations parse_activations(std::string_view name, std::string_view option) {
  if (name == "q8") return Activations::Q8;
  if (name == "f32") return Activations::F32;
  fail_as(ErrorKind::kBadRequest, option, ": '", name, "' is not an activation type (allowed: q8, f32)");
}

Weight Weight::of(Tensor t) {
  Weight m;
  m.rows = t.shape.size() == 2 ? t.shape[0] : 0;
  m.cols = t.shape.size() == 2 ? t.shape[1] : 0;
  m.dense = std::move(t);
  return m;
}

Weight Weight::of(AffineQuantized q) {
  Weight m;
  m.rows = q.rows;
  m.cols = q.cols;
  m.quant = std::move(q);
  return m;
}

const char* activations_name(Activations a) { return a == Activations::F32 ? "f32" : "q8"; }

int64_t prepare_weight(Weight& m, ThreadPool* pool, Activations a) {
  if (a == Activations::F32) {
    // mlx affine: matmul_affine's F32 kernel, as loaded; GGUF blocks: dequantized per tile.
    if (m.interleaved) fail_as(ErrorKind::kInternal, "prepare_weight: f32 activations on a matrix already interleaved");
    m.f32_activations = !m.quantized() && dtype_is_quantized(m.dense.dtype);
    m.bf16_activations = false;
    return 0;
  }
  if (!m.quantized() && m.dense.dtype == DType::BF16) {
    m.bf16_activations = bf16_dot_supported();
    return 0;
  }
  if (m.interleaved) return 0;
  if (m.quantized()) {
    if (!interleave_enabled_affine()) return 0;
    m.interleaved = interleave_affine(m.quant, pool);
  } else {
    if (!interleave_enabled(m.dense.dtype)) return 0;
    m.interleaved = interleave_blocks(m.dense, pool);
  }
  return m.interleaved->nbytes();
}


}  // namespace graft::compute

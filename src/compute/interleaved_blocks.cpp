// Weights interleaved 16 rows at a time: the copy of GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 made at load, its inverse
// (tests), the scalar model of the block-model kernel (every kind), and the column driver. The copy of
// mlx affine matrices is interleaved_affine.cpp.
#include "compute/interleaved_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>


#include "graft/core/error.h"
#include "graft/core/huge_pages.h"

namespace graft::compute {

namespace {
constexpr int64_t kRows = kInterleavedRows;
constexpr int64_t kBlock = kInterleavedBlock;
bool has_min(DType t) { return t == DType::Q4_1 || t == DType::Q5_1; }
int64_t codes_at(DType t) { return has_min(t) ? 4 : 2; }  // after d (and the min); Q5's qh comes first
bool five_bit(DType t) { return t == DType::Q5_0 || t == DType::Q5_1; }
InterleavedKind kind_of(DType t) {
  switch (t) {
    case DType::Q4_0: return InterleavedKind::Q4_0;
    case DType::Q4_1: return InterleavedKind::Q4_1;
    case DType::Q5_0: return InterleavedKind::Q5_0;
    case DType::Q5_1: return InterleavedKind::Q5_1;
    default: return InterleavedKind::Q8_0;
  }
}
DType gguf_type(InterleavedKind k) {
  switch (k) {
    case InterleavedKind::Q4_0: return DType::Q4_0;
    case InterleavedKind::Q4_1: return DType::Q4_1;
    case InterleavedKind::Q5_0: return DType::Q5_0;
    case InterleavedKind::Q5_1: return DType::Q5_1;
    default: return DType::Q8_0;
  }
}
// A Q5 block's qh (bit c: column c's fifth bit) as the copy's word of fifth bits for one row:
// byte e, bit t = bit 4t + e; and back.
uint32_t fifth_bits(uint32_t qh) {
  uint32_t out = 0;
  for (int c = 0; c < 32; ++c) out |= ((qh >> c) & 1u) << (8 * (c % 4) + c / 4);
  return out;
}
uint32_t qh_of(uint32_t fifth) {
  uint32_t qh = 0;
  for (int c = 0; c < 32; ++c) qh |= ((fifth >> (8 * (c % 4) + c / 4)) & 1u) << c;
  return qh;
}
bool interleave_cpu_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("GRAFT_Q8_INTERLEAVE");
    const detail::Q8Kernel k = detail::best_q8_kernel();
    return !(e && std::strcmp(e, "0") == 0) &&
           (k == detail::Q8Kernel::Avx2 || k == detail::Q8Kernel::AvxVnni || k == detail::Q8Kernel::Avx512Vnni);
  }();
  return on;
}
}  // namespace

const char* interleaved_kind_name(InterleavedKind k) {
  switch (k) {
    case InterleavedKind::Q4_0: return "Q4_0";
    case InterleavedKind::Q4_1: return "Q4_1";
    case InterleavedKind::Q8_0: return "Q8_0";
    case InterleavedKind::Affine4: return "affine 4-bit";
    case InterleavedKind::Affine8: return "affine 8-bit";
    case InterleavedKind::Q5_0: return "Q5_0";
    case InterleavedKind::Q5_1: return "Q5_1";
    case InterleavedKind::Q6_K: return "Q6_K";
    case InterleavedKind::Affine5: return "affine 5-bit";
    case InterleavedKind::Q4_K: return "Q4_K";
  }
  return "?";
}

bool interleavable(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 || t == DType::Q8_0 ||
         t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
}

bool interleave_enabled(DType t) { return interleave_cpu_enabled() && interleavable(t); }

bool interleave_enabled_affine() { return interleave_cpu_enabled(); }

namespace detail {
std::shared_ptr<InterleavedBlocks> allocate_interleaved(InterleavedKind kind, int64_t n, int64_t k, int param_shift) {
  auto out = std::make_shared<InterleavedBlocks>();
  InterleavedBlocks& b = *out;
  b.kind = kind;
  b.n = n;
  b.k = k;
  b.blocks = k / kBlock;
  b.param_shift = param_shift;
  with_kind(kind, [&]<InterleavedKind K>() {
    using F = InterleavedFmt<K>;
    b.code_bytes = F::kCodeBytes;
    b.scale_bytes = F::kAffine ? F::kScaleBytes >> param_shift : F::kScaleBytes;  // affine: a group's record per block
  });
  b.group_bytes = (b.blocks * (b.code_bytes + b.scale_bytes) + 63) / 64 * 64;
  b.storage = huge_page_buffer(static_cast<size_t>(b.groups() * b.group_bytes));
  b.base = b.storage.get();
  return out;
}
}  // namespace detail

std::shared_ptr<const InterleavedBlocks> interleave_blocks(const Tensor& w, ThreadPool* pool) {
  if (w.dtype == DType::Q4_K) return interleave_q4_k(w, pool);  // an affine 4-bit copy
  if (w.dtype == DType::Q5_K) return interleave_q5_k(w, pool);  // an affine 5-bit copy
  if (w.dtype == DType::Q6_K) return interleave_q6_k(w, pool);
  if (!interleavable(w.dtype) || w.shape.size() != 2 || w.shape[1] % kBlock != 0)
    fail_as(ErrorKind::kInternal, "interleave_blocks: a [n, k] Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 or Q4_K weight with k a multiple of 32, got ",
            dtype_name(w.dtype), " ", shape_str(w.shape));
  auto out = detail::allocate_interleaved(kind_of(w.dtype), w.shape[0], w.shape[1], 0);
  InterleavedBlocks& b = *out;
  const int64_t src_block = dtype_block_bytes(w.dtype), row_bytes = b.blocks * src_block, at = codes_at(w.dtype);
  const auto* src = static_cast<const uint8_t*>(w.data);
  const bool q4 = w.dtype == DType::Q4_0 || w.dtype == DType::Q4_1, mins = has_min(w.dtype), q5 = five_bit(w.dtype);
  detail::fill_rows(b, pool, [&](int64_t g, int64_t r) {
    auto* codes = const_cast<uint8_t*>(b.codes(g));
    auto* scales = const_cast<uint16_t*>(b.scales(g));
    const uint8_t* row = src + (g * kRows + r) * row_bytes;
    for (int64_t blk = 0; blk < b.blocks; ++blk) {
      const uint8_t* p = row + blk * src_block;
      uint16_t* s = scales + blk * b.scale_bytes / 2;
      std::memcpy(&s[r], p, 2);
      if (mins) std::memcpy(&s[kRows + r], p + 2, 2);
      uint8_t* dst = codes + blk * b.code_bytes + r * 4;
      if (q5) {  // qh, then the nibbles as Q4's
        uint32_t qh;
        std::memcpy(&qh, p + at, 4);
        const uint32_t fifth = fifth_bits(qh);
        std::memcpy(dst + 256, &fifth, 4);
        for (int t = 0; t < 4; ++t) std::memcpy(dst + t * 64, p + at + 4 + 4 * t, 4);
        continue;
      }
      const uint32_t flip = q4 ? 0u : 0x80808080u;  // Q8_0: q_w + 128 in every byte
      for (int t = 0; t < (q4 ? 4 : 8); ++t) {
        uint32_t word;
        std::memcpy(&word, p + at + 4 * t, 4);
        word ^= flip;
        std::memcpy(dst + t * 64, &word, 4);
      }
    }
  });
  return out;
}

void deinterleave_row(const InterleavedBlocks& b, int64_t j, uint8_t* row) {
  if (b.affine()) fail_as(ErrorKind::kInternal, "deinterleave_row: an affine copy (deinterleave_affine_row)");
  if (b.kind == InterleavedKind::Q6_K) return deinterleave_q6_k_row(b, j, row);
  if (b.kind == InterleavedKind::Q4_K) return deinterleave_q4_k_row(b, j, row);
  const DType source = gguf_type(b.kind);
  const int64_t g = j / kRows, r = j % kRows, src_block = dtype_block_bytes(source), at = codes_at(source);
  const bool q4 = source == DType::Q4_0 || source == DType::Q4_1;
  for (int64_t blk = 0; blk < b.blocks; ++blk) {
    uint8_t* p = row + blk * src_block;
    const uint16_t* s = b.scales(g) + blk * b.scale_bytes / 2;
    std::memcpy(p, &s[r], 2);
    if (has_min(source)) std::memcpy(p + 2, &s[kRows + r], 2);
    const uint8_t* src = b.codes(g) + blk * b.code_bytes + r * 4;
    if (five_bit(source)) {  // back to qh and the nibbles
      uint32_t fifth;
      std::memcpy(&fifth, src + 256, 4);
      const uint32_t qh = qh_of(fifth);
      std::memcpy(p + at, &qh, 4);
      for (int t = 0; t < 4; ++t) std::memcpy(p + at + 4 + 4 * t, src + t * 64, 4);
      continue;
    }
    for (int t = 0; t < (q4 ? 4 : 8); ++t)
      for (int c = 0; c < 4; ++c)
        p[at + 4 * t + c] = q4 ? src[t * 64 + c] : static_cast<uint8_t>(src[t * 64 + c] ^ 0x80u);
  }
}

namespace detail {

int64_t interleaved_prefetch_ahead() {
  static const int64_t ahead = [] {
    const char* e = std::getenv("GRAFT_Q8_PREFETCH");
    return e ? std::atoll(e) : 2048;
  }();
  return ahead;
}

void interleaved_group_scalar(const InterleavedBlocks& b, const Q8Activations& act, int64_t g, float* out) {
  const int64_t k = b.k;
  // The format's facts as the SIMD kernels read them: nibbles, five bits or bytes; a min; the stored
  // code minus the model's q_w (Q4_0's nibble is q_w + 8, Q8_0's byte q_w + 128, Q5_0's code q_w + 16).
  struct Facts {
    bool q4, q5, q6, q4k, mins;
    int32_t offset;
  };
  const Facts f = with_kind(b.kind, []<InterleavedKind K>() {
    using F = InterleavedFmt<K>;
    return Facts{F::kNibbles, F::kFive, F::kSix, F::kQ4K, F::kMin, F::kOffset};
  });
  const bool q4 = f.q4, q5 = f.q5, q6 = f.q6, q4k = f.q4k, mins = f.mins;
  const int32_t offset = f.offset;
  for (int64_t i = 0; i < act.m; ++i)
    for (int64_t r = 0; r < kRows; ++r) {
      float acc = 0.0f;
      for (int64_t blk = 0; blk < b.blocks; ++blk) {
        const uint8_t* w = b.codes(g) + blk * b.code_bytes + r * 4;
        const int8_t* x = &act.q[i * k + blk * kBlock];
        int32_t part[2] = {0, 0};  // the sums of columns 0..15 and 16..31: each half has its own d_x
        for (int c = 0; c < kBlock; ++c) {
          const int t = c / 4, e = c % 4;
          const int32_t nibble = t < 4 ? (w[t * 64 + e] & 0x0f) : (w[(t - 4) * 64 + e] >> 4);
          const int32_t high2 = q6 ? (w[(4 + t / 4) * 64 + e] >> (2 * (t % 4))) & 3 : 0;  // (Q6_K: its word)
          const int32_t stored = q4   ? nibble
                                 : q5 ? (nibble | (((w[256 + e] >> t) & 1) << 4))
                                 : q6 ? (nibble | high2 << 4)
                                      : w[t * 64 + e];
          part[c / 16] += (stored - offset) * static_cast<int32_t>(x[c]);
        }
        const int64_t h0 = (i * k + blk * kBlock) / 16;  // the block's first half in d4 / 4, s16
        float dw[2] = {0.0f, 0.0f}, mw = 0.0f;
        if (q6) {
          const int8_t* sc = b.q6k_scales(g, blk);
          const float d = b.q6k_d(g, blk)[r];
          for (int p = 0; p < 2; ++p) dw[p] = d * static_cast<float>(sc[p * kRows + r]);
        } else if (q4k) {  // d·sc and (−dmin)·m: exact in F32
          const uint8_t* sm = b.q4k_scales(g, blk);
          const uint16_t* d = b.q4k_d(g, blk);
          dw[0] = f16_to_f32(d[r]) * static_cast<float>(sm[r]);
          mw = f16_to_f32(d[kRows + r]) * static_cast<float>(sm[kRows + r]);
        } else if (b.affine()) {
          const float* p = b.params(g) + (blk >> b.param_shift) * 32;
          dw[0] = p[r];
          mw = p[kRows + r];
        } else {
          const uint16_t* sc = b.scales(g) + blk * b.scale_bytes / 2;
          dw[0] = f16_to_f32(sc[r]);
          if (mins) mw = f16_to_f32(sc[kRows + r]);
        }
        if (q6) {  // a weight scale per half: one step each, with the half's d_x
          for (int p = 0; p < 2; ++p) acc = std::fma(static_cast<float>(part[p]), dw[p] * act.d4[4 * (h0 + p)], acc);
        } else {  // one: the halves' sums on the block scale's grid (exact), one step
          const int32_t sum = part[0] * (1 << act.e16[h0]) + part[1] * (1 << act.e16[h0 + 1]);
          const float block_scale = std::min(act.d4[4 * h0], act.d4[4 * (h0 + 1)]);  // the smaller d_x
          acc = std::fma(static_cast<float>(sum), dw[0] * block_scale, acc);
        }
        if (mins) acc = std::fma(mw, act.s16[h0] + act.s16[h0 + 1], acc);
      }
      out[i * kRows + r] = acc;
    }
}

bool interleaved_reads_packed(Q8Kernel kernel) { return kernel == Q8Kernel::Avx512Vnni; }

void prepare_interleaved(Q8Activations& act, Q8Kernel kernel, ThreadPool* pool) {
  if (interleaved_reads_packed(kernel)) act.pack_blocks8(pool);
}

void interleaved_cols(const InterleavedBlocks& b, const Q8Activations& act, float* y, int64_t ldy, bool accumulate,
                      int64_t j0, int64_t j1, Q8Kernel kernel) {
  if (act.k != b.k || (interleaved_reads_packed(kernel) && act.xb.size() != static_cast<size_t>(act.m * act.k)))
    fail_as(ErrorKind::kInternal, "interleaved_cols: activations of ", act.k, " columns (packed: ", act.xb.size(),
            " bytes) for a weight of ", b.k, " columns");
  const auto group = kernel == Q8Kernel::Avx512Vnni ? interleaved_group_avx512
                     : kernel == Q8Kernel::AvxVnni  ? interleaved_group_avxvnni
                     : kernel == Q8Kernel::Avx2     ? interleaved_group_avx2
                                                    : interleaved_group_scalar;
  thread_local std::vector<float> out;
  out.resize(static_cast<size_t>(act.m * kRows));
  for (int64_t g = j0 / kRows; g * kRows < j1; ++g) {
    group(b, act, g, out.data());
    const int64_t c0 = std::max(j0, g * kRows), c1 = std::min({j1, g * kRows + kRows, b.n});
    for (int64_t i = 0; i < act.m; ++i)
      for (int64_t j = c0; j < c1; ++j) {
        float& o = y[i * ldy + j];
        const float v = out[i * kRows + (j - g * kRows)];
        o = accumulate ? o + v : v;
      }
  }
}

}  // namespace detail
}  // namespace graft::compute

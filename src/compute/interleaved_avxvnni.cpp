// The AVX-VNNI kernel of the interleaved copies (interleaved_blocks.h: Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0, affine 4 / 8-bit), for CPUs
// with AVX-VNNI but not AVX512-VNNI (Alder Lake and later client cores): interleaved_256.inc with
// vpdpbusd, which adds four unsigned × signed byte products to each i32 lane without i16 steps, on
// the stored codes as they are (Q8_0's q_w + 128: the 128·Σ q_x taken back in the block's offset;
// affine 8-bit's q_w as it is).
// Four products are at most 4·255·127 = 129540 and a block's 32 at most 1036320: exact in i32.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "compute/interleaved_blocks.h"

namespace graft::compute::detail {

#define GRAFT_I256 __attribute__((target("avxvnni,avx2,fma,f16c"), always_inline)) inline
#define GRAFT_I256_FN __attribute__((target("avxvnni,avx2,fma,f16c")))

namespace {

#include "compute/interleaved_256.inc"

struct VnniDot {
  static constexpr int32_t kQ8Shift = 0;
  static GRAFT_I256 Word q8(__m256i stored) { return {stored, __m256i{}}; }
  template <bool kNibbles>
  static GRAFT_I256 __m256i scaled(int) {
    return __m256i{};
  }
  template <bool kNibbles>
  static GRAFT_I256 __m256i accumulate(__m256i sum, const Word& w, __m256i x, __m256i) {
    return _mm256_dpbusd_avx_epi32(sum, w.u, x);
  }
  static GRAFT_I256 __m256i accumulate_pair(__m256i sum, const Word& w0, __m256i x0, const Word& w1, __m256i x1) {
    return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(sum, w0.u, x0), w1.u, x1);
  }
  template <bool kNibbles>
  static GRAFT_I256 __m256i finish(__m256i sum, int e) {
    return _mm256_sll_epi32(sum, _mm_cvtsi32_si128(e));
  }
};

}  // namespace

void interleaved_group_avxvnni(const InterleavedBlocks& b, const Q8Activations& act, int64_t g, float* out) {
  group_by_format<VnniDot>(b, act, g, out);
}

}  // namespace graft::compute::detail

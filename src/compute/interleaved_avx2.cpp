// The AVX2 kernel of the interleaved copies (interleaved_blocks.h: Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0, affine 4 / 8-bit), for CPUs
// without AVX512-VNNI: interleaved_256.inc with byte products by _mm256_maddubs_epi16 (unsigned ×
// signed bytes, adjacent pairs added with i16 saturation) widened by _mm256_madd_epi16 with ones.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "compute/interleaved_blocks.h"

namespace graft::compute::detail {

#define GRAFT_I256 __attribute__((target("avx2,fma,f16c"), always_inline)) inline
#define GRAFT_I256_FN __attribute__((target("avx2,fma,f16c")))

namespace {

#include "compute/interleaved_256.inc"

// No pair may saturate (activations are clamped to ±127):
//   Nibbles (Q4_0, Q4_1, affine 4-bit: u = the nibble, 0..15): a maddubs pair is at most
//   2·15·127 = 3810, and the i16 partial sum takes the eight words of a block, at most 30480 < 32767;
//   so a block's i16 sums are exact and widened once, in finish().
//   8-bit (Q8_0's stored q_w + 128, affine's stored q_w, Q5's 5-bit code; all 0..255): unsigned bytes
//   would saturate (2·255·127 = 64770), so s = stored ^ 0x80 = stored − 128 (Q8_0: q_w; affine, Q5:
//   code − 128, all in −128..127) and maddubs(|s|, sign(x, s)) multiplies |s|·(±x) = s·x: a pair is at most 2·128·127 =
//   32512 < 32767 (|−128| reads as the unsigned byte 128), but two pairs would not fit i16, so each
//   word is widened to i32 at once. The kernel adds (128 − F::kOffset)·Σ q_x back (affine: 128·Σ q_x,
//   at most 128·32·127 in size: exact in i32), so the block sum is Σ q_w·q_x exactly as on VNNI.
struct Avx2Dot {
  static constexpr int32_t kQ8Shift = 128;
  static GRAFT_I256 Word q8(__m256i stored) {
    const __m256i s = _mm256_xor_si256(stored, _mm256_set1_epi8(static_cast<char>(0x80)));
    return {_mm256_abs_epi8(s), s};
  }
  // 8-bit codes: each word's i16 pairs are widened by a multiply-add, by s = 2^e (<= 2^11, an i16)
  // instead of 1, so the activations' shift costs nothing (a pair times 2^11 fits i32). Nibbles add
  // their pairs in i16 and widen once, in finish.
  template <bool kNibbles>
  static GRAFT_I256 __m256i scaled(int e) {
    return kNibbles ? __m256i{} : _mm256_set1_epi16(static_cast<int16_t>(1 << e));
  }
  template <bool kNibbles>
  static GRAFT_I256 __m256i accumulate(__m256i sum, const Word& w, __m256i x, __m256i s) {
    if constexpr (kNibbles) return chain(_mm256_add_epi16(sum, _mm256_maddubs_epi16(w.u, x)));
    const __m256i pairs = _mm256_maddubs_epi16(w.u, _mm256_sign_epi8(x, w.s));
    return chain(_mm256_add_epi32(sum, _mm256_madd_epi16(pairs, s)));
  }
  // Compilers reassociate integer vector adds into a tree, which keeps a block's eight products per
  // row live at once and spills them (about 150 stack moves per block at four rows, 40 without): an
  // empty asm that takes and gives the sum keeps the chain as written.
  static GRAFT_I256 __m256i chain(__m256i sum) {
    __asm__("" : "+x"(sum));
    return sum;
  }
  // Q6_K's 6-bit codes (0..63) are unsigned bytes maddubs takes as they are: a pair is at most
  // 2·63·127 = 16002, so two words' pairs add in i16 (32004 < 32767) and are widened then: 2.5
  // instructions a word where the 8-bit codes' sign trick takes 6.
  static GRAFT_I256 __m256i accumulate_pair(__m256i sum, const Word& w0, __m256i x0, const Word& w1, __m256i x1) {
    const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(w0.u, x0), _mm256_maddubs_epi16(w1.u, x1));
    return chain(_mm256_add_epi32(sum, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))));
  }
  // The nibbles' i16 pair sums are widened by a multiply-add anyway: by 2^e instead of 1.
  template <bool kNibbles>
  static GRAFT_I256 __m256i finish(__m256i sum, int e) {
    if constexpr (kNibbles) return _mm256_madd_epi16(sum, _mm256_set1_epi16(static_cast<int16_t>(1 << e)));
    return sum;  // (shifted as it was summed)
  }
};

}  // namespace

void interleaved_group_avx2(const InterleavedBlocks& b, const Q8Activations& act, int64_t g, float* out) {
  group_by_format<Avx2Dot>(b, act, g, out);
}

}  // namespace graft::compute::detail

// KV cache storage types (F32, F16, BF16): bytes per position, rounding on write, attention reading
// the stored type, the option's parser. The effect of the 16-bit caches on a real model's logits and
// greedy tokens is measured in tests/engine/kv_cache_types_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "graft/core/error.h"
#include "graft/runtime/kv_cache.h"
#include "graft/compute/ops.h"

namespace graft::runtime {
namespace {

model::ModelConfig small_config() {
  model::ModelConfig c;
  c.num_layers = 3;
  c.hidden_size = 96;
  c.num_heads = 6;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  return c;
}

std::vector<float> randv(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

TEST(KVCache, BytesPerPositionFollowTheType) {
  const model::ModelConfig c = small_config();
  ASSERT_EQ(c.kv_dim(), 32);
  // 3 layers x (keys + values) x 32 elements.
  EXPECT_EQ(KVCache(c, 8, DType::F32).bytes_per_position(), 3 * 2 * 32 * 4);
  EXPECT_EQ(KVCache(c, 8, DType::F16).bytes_per_position(), 3 * 2 * 32 * 2);
  EXPECT_EQ(KVCache(c, 8, DType::BF16).bytes_per_position(), 3 * 2 * 32 * 2);
  EXPECT_EQ(KVCache(c, 8).dtype(), kDefaultKVCacheType);
  EXPECT_EQ(kDefaultKVCacheType, DType::F16);
  KVCache k(c, 1000, DType::F16);
  EXPECT_EQ(k.allocated_bytes(), 0);
  k.reserve_more(10);  // grows by at least 256 positions
  EXPECT_EQ(k.allocated_bytes(), 256 * k.bytes_per_position());
  EXPECT_THROW(KVCache(c, 8, DType::Q8_0), Error);
}

TEST(KVCache, StoresRoundedToNearestEvenAndAttentionReadsTheStoredType) {
  const model::ModelConfig c = small_config();
  const int64_t n = 9, kvd = c.kv_dim(), hd = c.head_dim;
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    KVCache cache(c, 16, t);
    cache.reserve_more(n);
    std::vector<std::vector<float>> ks, vs;
    for (int64_t p = 0; p < n; ++p) {
      ks.push_back(randv(kvd, 100 + static_cast<uint32_t>(p)));
      vs.push_back(randv(kvd, 200 + static_cast<uint32_t>(p)));
      cache.store(1, p, ks.back().data(), vs.back().data());
    }
    cache.advance(n);
    // Each element is the scalar rounding of what was written.
    auto round = [t](float x) {
      return t == DType::F32 ? x : t == DType::F16 ? f16_to_f32(f32_to_f16(x)) : bf16_to_f32(f32_to_bf16(x));
    };
    std::vector<float> kw(n * kvd), vw(n * kvd);
    for (int64_t p = 0; p < n; ++p)
      for (int64_t i = 0; i < kvd; ++i) {
        ASSERT_EQ(cache.key_at(1, p, i), round(ks[p][i])) << dtype_name(t);
        ASSERT_EQ(cache.value_at(1, p, i), round(vs[p][i])) << dtype_name(t);
        kw[p * kvd + i] = round(ks[p][i]);
        vw[p * kvd + i] = round(vs[p][i]);
      }
    // attend_cached on positions [2, 9) of kv head 1 = attend on the rounded values in F32.
    const auto q = randv(hd, 7);
    const float scl = 0.25f;
    std::vector<float> s1(n), s2(n), ref(hd), got(hd);
    compute::attend(q.data(), &kw[2 * kvd + hd], &vw[2 * kvd + hd], kvd, n - 2, hd, scl, s1.data(), ref.data());
    attend_cached(cache, 1, 2, n - 2, hd, q.data(), hd, scl, s2.data(), got.data());
    for (int64_t i = 0; i < hd; ++i) ASSERT_EQ(got[i], ref[i]) << dtype_name(t) << " element " << i;
  }
}

TEST(KVCache, ParsesTheOptionAndRefusesOtherTypes) {
  EXPECT_EQ(parse_kv_cache_type("f32"), DType::F32);
  EXPECT_EQ(parse_kv_cache_type("F16"), DType::F16);
  EXPECT_EQ(parse_kv_cache_type("bf16"), DType::BF16);
  for (DType t : {DType::F32, DType::F16, DType::BF16}) EXPECT_EQ(parse_kv_cache_type(kv_cache_type_name(t)), t);
  for (const char* bad : {"q8_0", "f8", "", "fp16", "f16 "}) {
    try {
      parse_kv_cache_type(bad);
      FAIL() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadRequest);
      const std::string msg = e.what();
      EXPECT_NE(msg.find("--cache-type"), std::string::npos) << msg;
      EXPECT_NE(msg.find("f32, f16, bf16"), std::string::npos) << msg;
    }
  }
}

}  // namespace
}  // namespace graft::runtime

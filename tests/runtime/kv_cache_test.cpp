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
    attend_cached(cache, 1, 2, n - 2, 1, q.data(), hd, scl, s2.data(), got.data());
    for (int64_t i = 0; i < hd; ++i) ASSERT_EQ(got[i], ref[i]) << dtype_name(t) << " element " << i;
  }
}

// The cache is stored head-major, so growing it moves every head's positions, and a prefix copy
// between caches of different allocations puts each head at the other's place: every element
// written reads back after growing 256 -> 512 -> 1024 positions, and from a copy into a cache
// that allocated less, and attention over the copy equals attention over the original.
TEST(KVCache, GrowingAndCopyingAPrefixKeepEveryHeadsPositions) {
  const model::ModelConfig c = small_config();
  const int64_t n = 700, kvd = c.kv_dim(), hd = c.head_dim;
  for (DType t : {DType::F32, DType::F16}) {
    KVCache cache(c, 2048, t);
    auto key = [&](int64_t p) { return randv(kvd, 1000 + static_cast<uint32_t>(p)); };
    auto value = [&](int64_t p) { return randv(kvd, 5000 + static_cast<uint32_t>(p)); };
    for (int64_t p = 0; p < n; ++p) {  // a token at a time, as decode grows it
      cache.reserve_more(1);
      for (int64_t l = 0; l < c.num_layers; ++l) cache.store(l, p, key(p + l).data(), value(p + l).data());
      cache.advance(1);
    }
    ASSERT_EQ(cache.allocated_bytes(), 1024 * cache.bytes_per_position());
    KVCache copy(c, 2048, t);
    copy.reserve_more(3);  // 256 positions allocated: the heads sit elsewhere than in `cache`
    copy.copy_prefix(cache, 600);
    ASSERT_EQ(copy.size(), 600);
    for (int64_t l = 0; l < c.num_layers; ++l)
      for (int64_t p = 0; p < n; ++p) {
        const auto k = key(p + l), v = value(p + l);
        for (int64_t i = 0; i < kvd; ++i) {
          const float kr = t == DType::F32 ? k[i] : f16_to_f32(f32_to_f16(k[i]));
          const float vr = t == DType::F32 ? v[i] : f16_to_f32(f32_to_f16(v[i]));
          ASSERT_EQ(cache.key_at(l, p, i), kr) << l << " " << p << " " << i;
          ASSERT_EQ(cache.value_at(l, p, i), vr) << l << " " << p << " " << i;
          if (p < 600) {
            ASSERT_EQ(copy.key_at(l, p, i), kr) << l << " " << p << " " << i;
            ASSERT_EQ(copy.value_at(l, p, i), vr) << l << " " << p << " " << i;
          }
        }
      }
    const auto q = randv(3 * hd, 9);
    std::vector<float> s1(3 * 600), s2(3 * 600), a(3 * hd), b(3 * hd);
    attend_cached(cache, 2, 0, 600, 1, q.data(), hd, 0.25f, s1.data(), a.data(), 3);
    attend_cached(copy, 2, 0, 600, 1, q.data(), hd, 0.25f, s2.data(), b.data(), 3);
    EXPECT_EQ(a, b);
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

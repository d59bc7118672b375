// llama.cpp GGUF LoRA adapter import on synthetic files (tests/gguf_test_writer.h builds them byte by
// byte): metadata and scale rules as llama.cpp applies them (s = alpha / rank, 1 when alpha is 0 or
// missing), llama.cpp's layouts normalized to ΔW = s·B·A (token_embd's flipped get_rows pair
// included), and every refusal naming the file and tensor. Values are exact (F32 copies, transposes).
// Converter-made files and merged tensors against PEFT: tests/model/gguf_adapters_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "gguf_test_writer.h"
#include "graft/adapter/weight_adapter.h"
#include "graft/core/convert.h"
#include "graft/core/error.h"

namespace graft::adapter {
namespace {

using test::GgufBuilder;
namespace fs = std::filesystem;

std::string f32_bytes(const std::vector<float>& v) {
  std::string b(v.size() * 4, '\0');
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Values base + i (distinct).
std::vector<float> iota(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i);
  return v;
}

// An adapter header: general.type adapter, adapter.type lora, architecture llama, alpha.
GgufBuilder header(std::optional<float> alpha = 16.0f) {
  GgufBuilder b;
  b.kv_string("general.architecture", "llama").kv_string("general.type", "adapter").kv_string("adapter.type", "lora");
  if (alpha) b.kv("adapter.lora.alpha", test::kF32, test::Bytes().put(*alpha));
  return b;
}

// A q_proj pair of rank r for in=6, out=4 in llama.cpp's layout: lora_a ne [in, r], lora_b ne [r, out].
GgufBuilder& add_pair(GgufBuilder& b, const std::string& name, int r = 2) {
  b.tensor(name + ".lora_a", {6, static_cast<uint64_t>(r)}, test::kGgmlF32, f32_bytes(iota(6 * r, 1)));
  b.tensor(name + ".lora_b", {static_cast<uint64_t>(r), 4}, test::kGgmlF32, f32_bytes(iota(4 * r, 100)));
  return b;
}

class GgufImport : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("graft_gguf_import_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const GgufBuilder& b, const std::string& name = "a.gguf") {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << b.build();
    return p;
  }
  // Import must fail with a message holding every part of `needles` (and the file path).
  void expect_refused(const GgufBuilder& b, std::vector<std::string> needles) {
    const std::string p = write(b);
    try {
      read_weight_adapter(p);
      ADD_FAILURE() << "imported; expected a refusal mentioning " << needles[0];
    } catch (const Error& e) {
      needles.push_back(p);
      for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
  }
  fs::path dir_;
};

TEST_F(GgufImport, PairNormalizedWithAlphaOverRank) {
  GgufBuilder b = header(16.0f);
  add_pair(b, "blk.0.attn_q.weight", 2);
  b.kv_string("adapter.lora.task_name", "pirate").kv_string("adapter.lora.prompt_prefix", "Arr: ");
  const WeightAdapter a = read_weight_adapter(write(b));
  EXPECT_EQ(a.format, AdapterFormat::Gguf);
  ASSERT_EQ(a.targets.size(), 1u);
  const AdapterTarget& t = a.targets[0];
  EXPECT_EQ(t.module, "blk.0.attn_q");
  EXPECT_EQ(t.param, "weight");
  EXPECT_FALSE(t.embedding);
  const auto& u = std::get<LowRankUpdate>(t.update);
  EXPECT_EQ(u.a.shape, (Shape{2, 6}));
  EXPECT_EQ(u.b.shape, (Shape{4, 2}));
  EXPECT_EQ(u.scale, 8.0f);  // 16 / 2
  EXPECT_EQ(u.a.as<float>()[7], 8.0f);  // A[1][1] = 1 + 7: the file's row-major bytes as they are
  EXPECT_EQ(u.b.as<float>()[5], 105.0f);
  EXPECT_EQ(a.metadata.at("architecture"), "llama");
  EXPECT_EQ(a.metadata.at("task_name"), "pirate");
  EXPECT_EQ(a.metadata.at("prompt_prefix"), "Arr: ");
  EXPECT_EQ(a.metadata.at("adapter.lora.alpha"), "16");
  EXPECT_EQ(a.metadata.at("tensor_types"), "F32 x2");
}

TEST_F(GgufImport, AlphaZeroOrMissingMeansScaleOne) {
  for (std::optional<float> alpha : {std::optional<float>(0.0f), std::optional<float>()}) {
    GgufBuilder b = header(alpha);
    add_pair(b, "blk.1.ffn_up.weight", 4);
    const WeightAdapter a = read_weight_adapter(write(b));
    EXPECT_EQ(std::get<LowRankUpdate>(a.targets[0].update).scale, 1.0f);
    EXPECT_EQ(a.metadata.count("task_name"), 0u);
  }
}

TEST_F(GgufImport, TokenEmbdPairIsFlippedForGetRows) {
  // llama.cpp: lora_a ne [r, vocab] (shape [vocab, r]), lora_b ne [r, dim]; ΔE = s·lora_a·lora_bᵀ.
  GgufBuilder b = header(4.0f);
  b.tensor("token_embd.weight.lora_a", {2, 5}, test::kGgmlF32, f32_bytes(iota(10, 1)));
  b.tensor("token_embd.weight.lora_b", {2, 3}, test::kGgmlF32, f32_bytes(iota(6, 10)));
  const WeightAdapter a = read_weight_adapter(write(b));
  const AdapterTarget& t = a.targets[0];
  EXPECT_EQ(t.module, "token_embd");
  EXPECT_TRUE(t.embedding);
  const auto& u = std::get<LowRankUpdate>(t.update);
  EXPECT_EQ(u.scale, 2.0f);
  EXPECT_EQ(u.b.shape, (Shape{5, 2}));  // [vocab, r]
  EXPECT_EQ(u.a.shape, (Shape{2, 3}));  // lora_bᵀ [r, dim]
  // A[k][d] = lora_b[d][k]: lora_b row-major [3, 2] holds 10..15, so A[1][2] = lora_b[2][1] = 15.
  EXPECT_EQ(u.a.as<float>()[1 * 3 + 2], 15.0f);
  EXPECT_EQ(u.a.as<float>()[0 * 3 + 1], 12.0f);
}

TEST_F(GgufImport, F16AndQ8FactorsRead) {
  GgufBuilder b = header(2.0f);
  std::string half(12 * 2, '\0');
  std::vector<float> hv = iota(12, 1);
  convert_from_f32(hv.data(), DType::F16, reinterpret_cast<uint8_t*>(half.data()), 12);
  // Q8_0 lora_a ne [32, 1]: one block, d = 0.5 (f16 0x3800), q = -16..15.
  std::string q8(34, '\0');
  q8[0] = 0x00;
  q8[1] = 0x38;
  for (int i = 0; i < 32; ++i) q8[2 + i] = static_cast<char>(i - 16);
  b.tensor("output.weight.lora_a", {32, 1}, test::kGgmlQ8_0, q8);
  b.tensor("output.weight.lora_b", {1, 12}, test::kGgmlF16, half);
  const WeightAdapter a = read_weight_adapter(write(b));
  const auto& u = std::get<LowRankUpdate>(a.targets[0].update);
  EXPECT_EQ(u.a.dtype, DType::F32);  // dequantized once at import
  EXPECT_EQ(u.a.as<float>()[0], -8.0f);
  EXPECT_EQ(u.a.as<float>()[31], 7.5f);
  EXPECT_EQ(u.b.dtype, DType::F16);  // kept as stored
  EXPECT_EQ(u.scale, 2.0f);
  EXPECT_EQ(a.metadata.at("tensor_types"), "F16 x1, Q8_0 x1");
}

TEST_F(GgufImport, RefusesWhatLlamaCppRefuses) {
  {
    GgufBuilder b;
    b.kv_string("general.architecture", "llama").kv_string("general.type", "model");
    expect_refused(b, {"general.type is 'model'", "--model"});
  }
  {
    GgufBuilder b;
    b.kv_string("general.architecture", "llama").kv_string("general.type", "adapter").kv_string("adapter.type", "cvec");
    expect_refused(b, {"adapter.type is 'cvec'", "expected 'lora'"});
  }
  {
    GgufBuilder b = header();
    add_pair(b, "blk.0.attn_q.weight");
    b.f32_tensor("blk.0.attn_q.weight.lora_c", {4});
    expect_refused(b, {"'blk.0.attn_q.weight.lora_c'", "unexpected suffix"});
  }
  {
    GgufBuilder b = header();
    b.f32_tensor("blk.0.attn_q.weight.lora_a", {6, 2});
    expect_refused(b, {"'blk.0.attn_q.weight'", "missing one component", "lora_b"});
  }
  {
    // lora_a stored [in, r] the other way round (the old finetune example's layout).
    GgufBuilder b = header();
    b.f32_tensor("blk.0.attn_q.weight.lora_a", {2, 6});
    b.f32_tensor("blk.0.attn_q.weight.lora_b", {2, 4});
    expect_refused(b, {"'blk.0.attn_q.weight.lora_a'", "not transposed"});
  }
  {
    GgufBuilder b = header();
    add_pair(b, "blk.0.attn_q.weight");
    b.f32_tensor("blk.0.attn_norm.weight", {6});
    expect_refused(b, {"'blk.0.attn_norm.weight'", "norm"});
  }
  {
    GgufBuilder b = header();
    add_pair(b, "blk.0.attn_q.weight");
    b.kv_i32s("adapter.alora.invocation_tokens", {5, 6});
    expect_refused(b, {"adapter.alora.invocation_tokens", "activated LoRA"});
  }
  {
    GgufBuilder b = header();
    b.tensor("blk.0.attn_q.weight.lora_a", {6, 1}, test::kGgmlF32, f32_bytes({1, 2, NAN, 4, 5, 6}));
    b.f32_tensor("blk.0.attn_q.weight.lora_b", {1, 4});
    expect_refused(b, {"'blk.0.attn_q.weight.lora_a'", "non-finite"});
  }
  {
    GgufBuilder b = header();
    b.f32_tensor("blk.0.attn_q.weight.lora_a", {6, 2, 1});
    b.f32_tensor("blk.0.attn_q.weight.lora_b", {2, 4});
    expect_refused(b, {"'blk.0.attn_q.weight.lora_a'", "2-D"});
  }
  {
    GgufBuilder b = header();
    expect_refused(b, {"no LoRA tensors"});
  }
}

}  // namespace
}  // namespace graft::adapter

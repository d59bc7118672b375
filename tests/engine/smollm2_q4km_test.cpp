// SmolLM2-135M-Instruct as the Q4_K_M file llama.cpp makes of it, against llama.cpp itself
// (fixture: tools/gen_q4km_reference.py, llama-cpp-python 0.3.36's llama.cpp).
//
// CI cannot build llama.cpp and PyPI ships no Q4_K_M SmolLM2, so the file is made here: the demo
// Q4_1 GGUF requantized by graft's reference quantizers (graft/core/gguf_quantize.h) to the type
// llama-quantize chose for each tensor (Q4_K, Q6_K, Q5_0, Q8_0; the fixture lists them). Step 1
// checks that every tensor's bytes are llama-quantize's (CRC-32 of each), so step 2 runs the very
// file llama.cpp ran, on graft's default path (blocks kept quantized, activations rounded to 8
// bits). Step 2 feeds graft llama.cpp's 32 greedy tokens on 3 prompts (teacher forcing, so every
// step is compared even after a flip) and compares its logits with llama.cpp's 8 highest at each
// step and its choice with llama.cpp's. Both engines round activations to 8 bits, but differently
// (llama.cpp: Q8_K per 256 elements for the K-quant matrices, Q8_0 with an f16 scale per 32
// otherwise; graft: per 32 with an F32 scale), and both keep an F16 KV cache; the bounds below
// say what that costs and where a different token is accepted. Logits are identical at 1 and 2
// threads.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "graft/core/convert.h"
#include "graft/core/gguf_quantize.h"
#include "graft/io/gguf.h"
#include "graft/io/gguf_writer.h"
#include "graft/model/loader.h"
#include "support/run_util.h"
#include "test_paths.h"

namespace graft::runtime {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Bounds. The spread between the engines is the 8-bit activation rounding's: this model's activations
// carry outliers of 10-45x the mean, so rounding them per block moves logits (around 20-30 here) by
// up to 2-3 through 30 layers (smollm2_test's Q8KernelsStayNearTheF32Path: graft's own 8-bit path
// against its exact F32 path, max |Δ| 2.1-3.2, bound 4). Measured on this file (AVX512-VNNI
// kernels, interleaved copies; AVX2 and scalar kernels 3.12; teacher-forced, 96 steps): graft vs llama.cpp max |Δ| 3.09 over
// llama.cpp's 8 highest logits at each step; graft's exact F32 path vs llama.cpp 1.46, vs graft's
// 8-bit path 2.30 — the two 8-bit paths land on either side of the exact one.
//   kLogitBound: max |graft's logit − llama.cpp's| over llama.cpp's top 8 at every step (as the
//     Q8 test's bound against F32).
//   kNearTie: a step may pick another token than llama.cpp only where llama.cpp's own top-2 gap is
//     below it (measured at the 6 flips: 0.04-0.25).
//   kFlipMargin: and where graft scores llama.cpp's token at most this far below its own pick
//     (measured 0.08-1.21).
//   kMaxFlips: at most this many of the 96 steps pick another token (measured 6; a 5 % error in
//     one of the four Q6_K scale chunks of the fused kernel makes it 11).
constexpr float kLogitBound = 4.0f;
constexpr double kNearTie = 0.5;
constexpr float kFlipMargin = 2.0f;
constexpr int kMaxFlips = 8;

DType dtype_named(const std::string& name) {
  for (DType t : {DType::F32, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K,
                  DType::Q6_K})
    if (dtype_name(t) == name) return t;
  throw std::runtime_error("fixture names type " + name + ", which this test does not write");
}

uint32_t crc32_of(const Tensor& t) {
  return static_cast<uint32_t>(crc32(0L, static_cast<const Bytef*>(t.data), static_cast<uInt>(t.nbytes())));
}

// The demo file requantized as the fixture lists; returns the path of the written GGUF (under
// a fresh temporary directory) or fails the test on the first tensor whose bytes differ.
std::string write_requantized(const json& ref, const fs::path& dir) {
  auto src = io::GgufFile::open(test::smollm2_gguf());
  std::vector<io::GgufWriteTensor> tensors;
  int requantized = 0, mismatched = 0;
  for (const json& t : ref["tensors"]) {
    const std::string name = t["name"];
    const Tensor in = src->tensor(name);
    EXPECT_EQ(dtype_name(in.dtype), t["source_type"].get<std::string>()) << name;
    const DType to = dtype_named(t["type"]);
    Tensor out = in;
    if (to != in.dtype) {
      const int64_t rows = in.shape.size() == 1 ? 1 : in.shape[0];
      const std::vector<float> f32 = rows_to_f32(in, 0, rows);
      std::vector<uint8_t> bytes(static_cast<size_t>(dtype_bytes(to, in.numel())));
      quantize_gguf_blocks(to, f32.data(), bytes.data(), in.numel());
      out = Tensor::owned(to, in.shape, std::move(bytes));
      ++requantized;
    }
    const uint32_t want = t["crc32"].get<uint32_t>();
    if (crc32_of(out) != want && ++mismatched <= 5)
      ADD_FAILURE() << name << " as " << dtype_name(to) << ": bytes differ from llama-quantize's (CRC-32 " << crc32_of(out)
                    << ", expected " << want << ")";
    tensors.push_back({name, out});
  }
  EXPECT_EQ(mismatched, 0) << "of " << ref["tensors"].size() << " tensors";
  EXPECT_GT(requantized, 200);
  std::vector<std::pair<std::string, io::GgufValue>> metadata;
  for (const auto& [key, value] : src->metadata())
    if (key != "general.alignment") metadata.emplace_back(key, value);
  for (auto& [key, value] : metadata)  // general.file_type, general.quantization_version: uint32
    if (ref["metadata"].contains(key)) value.value = ref["metadata"][key].get<uint64_t>();
  const std::string path = (dir / "SmolLM2-135M-Instruct.Q4_K_M.gguf").string();
  io::write_gguf(path, metadata, tensors);
  return path;
}

// graft fed llama.cpp's greedy tokens (teacher forcing), so every one of the 32 steps is compared
// even after the engines would have gone separate ways.
struct Forced {
  std::vector<int32_t> argmax;           // graft's choice at each step
  std::vector<std::vector<float>> logits;  // graft's logits at each step
};

Forced run_forced(const model::LoadedModel& m, const std::vector<int32_t>& prompt, const std::vector<int32_t>& tokens,
                  int threads) {
  ThreadPool pool(threads);
  Transformer t(m.config, m.weights);
  KVCache cache(m.config, static_cast<int64_t>(prompt.size() + tokens.size()) + 1);  // F16, as llama.cpp's
  SequenceInput in{&cache, prompt, false, {}};
  Forced f;
  f.logits.push_back(t.forward(pool, std::span(&in, 1)));
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto& lg = f.logits.back();
    f.argmax.push_back(static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin()));
    if (i + 1 == tokens.size()) break;
    SequenceInput step{&cache, std::span(&tokens[i], 1), false, {}};
    f.logits.push_back(t.forward(pool, std::span(&step, 1)));
  }
  return f;
}

TEST(SmolLM2Q4KM, RequantizedFileIsLlamaQuantizesAndGreedyTokensAreLlamaCpps) {
  if (!fs::exists(test::smollm2_gguf())) GTEST_SKIP() << "run `make models` first";
  const json ref = test::read_json(test::fixture("smollm2/q4_k_m_llamacpp.json"));
  ASSERT_EQ(ref["tensors"].size(), 272u);
  const fs::path dir = fs::temp_directory_path() / ("graft_q4km_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    fs::path d;
    ~Cleanup() { fs::remove_all(d); }
  } cleanup{dir};
  const std::string path = write_requantized(ref, dir);
  ASSERT_FALSE(HasFailure()) << "the requantized file is not llama-quantize's; the token test would be meaningless";
  EXPECT_EQ(fs::file_size(path), ref["file_bytes"].get<uint64_t>()) << "same tensors, same metadata: same size";

  const model::LoadedModel m = model::load_model(path);
  ASSERT_EQ(ref["prompts"].size(), 3u);
  int steps = 0, flips = 0;
  float max_diff = 0;
  for (const json& p : ref["prompts"]) {
    const std::string kind = p["kind"];
    const auto prompt = p["ids"].get<std::vector<int32_t>>();
    const auto want = p["greedy"].get<std::vector<int32_t>>();
    const auto want_gap = p["top2_gap"].get<std::vector<double>>();
    const auto top_ids = p["top_ids"].get<std::vector<std::vector<int32_t>>>();
    const auto top_logits = p["top_logits"].get<std::vector<std::vector<float>>>();
    ASSERT_EQ(want.size(), 32u);
    const Forced two = run_forced(m, prompt, want, 2);
    const Forced one = run_forced(m, prompt, want, 1);
    EXPECT_TRUE(one.logits == two.logits) << kind << ": logits differ between 1 and 2 threads";
    size_t agree = 0;
    while (agree < want.size() && two.argmax[agree] == want[agree]) ++agree;
    std::printf("%s: graft's greedy run equals llama.cpp's for %zu/32 tokens\n", kind.c_str(), agree);
    for (size_t i = 0; i < want.size(); ++i, ++steps) {
      const std::vector<float>& lg = two.logits[i];
      for (size_t j = 0; j < top_ids[i].size(); ++j)
        max_diff = std::max(max_diff, std::abs(lg[static_cast<size_t>(top_ids[i][j])] - top_logits[i][j]));
      if (two.argmax[i] == want[i]) continue;
      ++flips;
      const float below = lg[static_cast<size_t>(two.argmax[i])] - lg[static_cast<size_t>(want[i])];
      std::printf("  step %zu: graft picks %d, llama.cpp %d; llama.cpp's top-2 gap %.4f, graft scores llama.cpp's "
                  "token %.4f below its own\n", i, two.argmax[i], want[i], want_gap[i], below);
      EXPECT_LT(want_gap[i], kNearTie) << kind << " step " << i << ": a flip where llama.cpp's top-2 gap is wide";
      EXPECT_LT(below, kFlipMargin) << kind << " step " << i << ": graft ranks llama.cpp's token far below its own";
    }
  }
  std::printf("%d of %d steps pick another token than llama.cpp (teacher-forced); max |logit - llama.cpp's| over its "
              "top 8 at every step %.4f\n", flips, steps, max_diff);
  EXPECT_LT(max_diff, kLogitBound);
  EXPECT_LE(flips, kMaxFlips) << "of " << steps;
}

}  // namespace
}  // namespace graft::runtime

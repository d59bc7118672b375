#include "graft/io/log_prob_file.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "graft/core/error.h"

namespace graft::io {

namespace {

constexpr char kMagic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};
constexpr uint64_t kHeaderBytes = sizeof(kMagic) + 3 * sizeof(int32_t);
// 16 nats below the most likely token: the range llama-perplexity keeps (e^-16 ~ 1e-7).
constexpr float kRangeNats = 16.0f;

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

uint64_t LogProbLayout::file_bytes() const {
  const auto records = static_cast<uint64_t>(n_chunk) * static_cast<uint64_t>(scored_per_chunk());
  return kHeaderBytes + static_cast<uint64_t>(n_chunk) * static_cast<uint64_t>(n_ctx) * sizeof(int32_t) +
         records * static_cast<uint64_t>(record_words()) * sizeof(uint16_t);
}

void encode_log_probs(std::span<const float> logits, float max_logit, float log_sum_exp, uint16_t* record) {
  const float min_logit = std::max(*std::min_element(logits.begin(), logits.end()), max_logit - kRangeNats);
  const float scale = (max_logit - min_logit) / 65535.0f;
  const float min_log_prob = min_logit - max_logit - log_sum_exp;
  std::memcpy(record, &scale, sizeof scale);
  std::memcpy(record + 2, &min_log_prob, sizeof min_log_prob);
  uint16_t* q = record + 4;
  const size_t n = logits.size();
  std::fill(q, q + 2 * ((n + 1) / 2), uint16_t{0});
  if (scale == 0.0f) return;  // every logit equal: every code 0 is exact
  const float inv = 1.0f / scale;
  for (size_t i = 0; i < n; ++i) {
    const float code = std::nearbyint((logits[i] - min_logit) * inv);
    q[i] = logits[i] > min_logit ? static_cast<uint16_t>(std::clamp(code, 0.0f, 65535.0f)) : uint16_t{0};
  }
}

LogProbWriter::LogProbWriter(const std::string& path, const LogProbLayout& layout, std::span<const int32_t> tokens)
    : path_(path), tmp_(path + ".tmp"), layout_(layout) {
  if (static_cast<int64_t>(tokens.size()) != layout.n_chunk * layout.n_ctx)
    fail_as(ErrorKind::kInternal, "log-prob file '", path, "': ", tokens.size(), " tokens for ", layout.n_chunk,
            " chunks of ", layout.n_ctx);
  out_.open(tmp_, std::ios::binary | std::ios::trunc);
  if (!out_) fail_as(ErrorKind::kIo, "'", tmp_, "': cannot be created");
  const auto n_ctx = static_cast<uint32_t>(layout.n_ctx);
  const auto n_vocab = static_cast<int32_t>(layout.n_vocab), n_chunk = static_cast<int32_t>(layout.n_chunk);
  out_.write(kMagic, sizeof kMagic);
  out_.write(reinterpret_cast<const char*>(&n_ctx), sizeof n_ctx);
  out_.write(reinterpret_cast<const char*>(&n_vocab), sizeof n_vocab);
  out_.write(reinterpret_cast<const char*>(&n_chunk), sizeof n_chunk);
  out_.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size_bytes()));
}

LogProbWriter::~LogProbWriter() {
  if (committed_) return;
  out_.close();
  std::remove(tmp_.c_str());
}

void LogProbWriter::write_records(std::span<const uint16_t> words) {
  out_.write(reinterpret_cast<const char*>(words.data()), static_cast<std::streamsize>(words.size_bytes()));
  if (!out_) fail_as(ErrorKind::kIo, "'", tmp_, "': write failed (disk full?)");
  records_written_ += words.size() / static_cast<uint64_t>(layout_.record_words());
}

void LogProbWriter::commit() {
  const auto expected = static_cast<uint64_t>(layout_.n_chunk * layout_.scored_per_chunk());
  if (records_written_ != expected)
    fail_as(ErrorKind::kInternal, "log-prob file '", path_, "': ", records_written_, " records written of ", expected);
  out_.close();
  if (!out_) fail_as(ErrorKind::kIo, "'", tmp_, "': write failed (disk full?)");
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) fail_as(ErrorKind::kIo, "'", path_, "': cannot rename the written file into place (", ec.message(), ")");
  committed_ = true;
}

LogProbFile::LogProbFile(const std::string& path) : file_(std::make_unique<MappedFile>(path)) {
  const uint8_t* p = file_->data();
  const size_t size = file_->size();
  if (size < kHeaderBytes || std::memcmp(p, kMagic, sizeof kMagic) != 0)
    fail("'", path, "' is not a saved log-probability file (expected the magic \"_logits_\" and a 20-byte header, "
         "as graft perplexity --kl-divergence-base or llama-perplexity writes)");
  layout_.n_ctx = load<uint32_t>(p + 8);
  layout_.n_vocab = load<int32_t>(p + 12);
  layout_.n_chunk = load<int32_t>(p + 16);
  // Bounded first so the size arithmetic below cannot overflow.
  if (layout_.n_ctx < 3 || layout_.n_ctx > (int64_t{1} << 24))
    fail("'", path, "': n_ctx ", layout_.n_ctx, " is outside [3, 16777216]");
  if (layout_.n_vocab < 1 || layout_.n_vocab > (int64_t{1} << 24))
    fail("'", path, "': n_vocab ", layout_.n_vocab, " is outside [1, 16777216]");
  if (layout_.n_chunk < 1 || layout_.n_chunk > (int64_t{1} << 24))
    fail("'", path, "': n_chunk ", layout_.n_chunk, " is outside [1, 16777216]");
  if (layout_.file_bytes() != size)
    fail("'", path, "': ", size, " bytes, but n_ctx ", layout_.n_ctx, ", n_vocab ", layout_.n_vocab, " and n_chunk ",
         layout_.n_chunk, " make ", layout_.file_bytes(), " (a truncated or different file)");
  tokens_ = {reinterpret_cast<const int32_t*>(p + kHeaderBytes), static_cast<size_t>(layout_.n_chunk * layout_.n_ctx)};
  records_offset_ = kHeaderBytes + tokens_.size_bytes();
}

LogProbRecord LogProbFile::record(int64_t chunk, int64_t j) const {
  const uint64_t index = static_cast<uint64_t>(chunk * layout_.scored_per_chunk() + j);
  const uint8_t* r = file_->data() + records_offset_ + index * layout_.record_words() * sizeof(uint16_t);
  const LogProbRecord rec{load<float>(r), load<float>(r + 4), reinterpret_cast<const uint16_t*>(r + 8)};
  if (!std::isfinite(rec.scale) || rec.scale < 0 || !std::isfinite(rec.min_log_prob))
    fail("'", path(), "': chunk ", chunk + 1, ", position ", layout_.first() + j, ": scale ", rec.scale,
         " and minimum log-probability ", rec.min_log_prob, " (expected finite numbers, the scale >= 0)");
  return rec;
}

}  // namespace graft::io

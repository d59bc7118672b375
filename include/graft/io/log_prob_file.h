// Saved log-probabilities of a perplexity run: llama-perplexity's `--kl-divergence-base` file, so a
// reference written by either engine scores the other (bench/accuracy.sh). The layout, little-endian:
//   "_logits_", uint32 n_ctx, int32 n_vocab, int32 n_chunk, int32 tokens[n_chunk * n_ctx],
//   then per chunk, per scored position (n_ctx - 1 - n_ctx/2 of them, the second half of the chunk
//   less its last token) one record of record_words(n_vocab) uint16 words:
//     float scale, float min_log_prob, uint16 q[n_vocab] (padded to an even count),
//     log p_i = min_log_prob + scale * q_i; q_i = 0 also stands for anything below min_log_prob.
// The range is the top 16 nats below the largest log-probability (or less when all logits are
// closer), so a stored log-probability is within scale/2 = 16/131070 of the true one above it.
#pragma once
#include <cstdint>
#include <fstream>
#include <memory>
#include <span>
#include <string>

#include "graft/core/mapped_file.h"

namespace graft::io {

struct LogProbLayout {
  int64_t n_ctx = 0, n_vocab = 0, n_chunk = 0;

  // Scored positions per chunk: [first(), n_ctx - 1), each predicting the next token.
  int64_t first() const { return n_ctx / 2; }
  int64_t scored_per_chunk() const { return n_ctx - 1 - first(); }
  int64_t record_words() const { return 2 * ((n_vocab + 1) / 2) + 4; }
  // The whole file's size in bytes.
  uint64_t file_bytes() const;
};

// One stored position, decoded on demand.
struct LogProbRecord {
  float scale = 0, min_log_prob = 0;
  const uint16_t* q = nullptr;  // n_vocab codes
  float log_prob(int64_t i) const { return min_log_prob + scale * static_cast<float>(q[i]); }
};

// Encodes one position's logits into `record` (record_words uint16): the log-probabilities
// logits[i] - max_logit - log_sum_exp, where the caller has computed both (once, for its own use too).
void encode_log_probs(std::span<const float> logits, float max_logit, float log_sum_exp, uint16_t* record);

// Writes a file atomically: a temporary beside `path`, renamed into place by commit(); removed if the
// writer is destroyed first (an error, an interrupt).
class LogProbWriter {
 public:
  LogProbWriter(const std::string& path, const LogProbLayout& layout, std::span<const int32_t> tokens);
  ~LogProbWriter();
  LogProbWriter(const LogProbWriter&) = delete;
  LogProbWriter& operator=(const LogProbWriter&) = delete;

  // The next records, in file order (chunk by chunk, position by position): count * record_words.
  void write_records(std::span<const uint16_t> words);
  // Checks that every record was written, flushes and renames the file into place.
  void commit();

 private:
  std::string path_, tmp_;
  LogProbLayout layout_;
  std::ofstream out_;
  uint64_t records_written_ = 0;
  bool committed_ = false;
};

// Reads a file written by LogProbWriter or llama-perplexity, mapped; every size is checked against
// the file's length before anything is read (kBadInput naming the file and the field).
class LogProbFile {
 public:
  explicit LogProbFile(const std::string& path);

  const LogProbLayout& layout() const { return layout_; }
  const std::string& path() const { return file_->path(); }
  // n_chunk * n_ctx token ids, as stored (the caller checks them against its vocabulary).
  std::span<const int32_t> tokens() const { return tokens_; }
  // The record of scored position `j` (0-based within the chunk's scored positions) of `chunk`.
  LogProbRecord record(int64_t chunk, int64_t j) const;

 private:
  std::unique_ptr<MappedFile> file_;
  LogProbLayout layout_;
  std::span<const int32_t> tokens_;  // in the mapping (offset 20: 4-byte aligned, as are records)
  uint64_t records_offset_ = 0;
};

}  // namespace graft::io

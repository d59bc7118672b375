// A completion request as the scheduler sees it: the prompt tokens, the sampling and stop rules,
// the adapter scales resolved at admission (its snapshot), and the channel its events flow back
// through to the HTTP thread that answers it.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "graft/core/error.h"
#include "graft/engine/adapter_registry.h"
#include "graft/engine/sequence.h"

namespace graft::server {

// One piece of a response: text that became final, the tokens behind it, and on the last event
// the summary of the whole generation (or the error that ended it).
struct JobEvent {
  int index = 0;  // the job's CompletionJob::index (its choice, with OpenAI's n > 1)
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<std::vector<engine::TokenProb>> probs;  // per token, with n_probs > 0
  std::vector<float> token_probs;                     // per token: the drawn token's, with n_probs or token_prob
  bool final = false;
  // Final event only.
  engine::StopReason reason = engine::StopReason::None;
  std::string stopping_word;
  int64_t slot = -1;
  int64_t prompt_tokens = 0;   // tokens_evaluated: the whole prompt
  int64_t tokens_cached = 0;   // prompt tokens whose KV was reused
  int64_t predicted = 0;       // tokens generated
  double prompt_ms = 0, predicted_ms = 0;
  std::vector<float> hidden;   // an embedding job's: [prompt tokens, hidden_size], after the final norm
  bool failed = false;
  ErrorKind error_kind = ErrorKind::kInternal;
  std::string error;
};

// Where a job's events go: one per request, shared by the jobs of one request's choices.
class JobChannel {
 public:
  void push(JobEvent e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(std::move(e));
    }
    cv_.notify_all();
  }
  // Waits up to `wait` for the next event; false on timeout.
  bool pop(JobEvent& out, std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, wait, [&] { return !events_.empty(); })) return false;
    out = std::move(events_.front());
    events_.pop_front();
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<JobEvent> events_;
};

struct CompletionJob {
  std::vector<int32_t> prompt;
  engine::SequenceParams params;    // its adapters are filled from `adapters` when it starts
  // Resolved at admission (its snapshot): the adapters it runs with and the cache key of that
  // setting. The scheduler's loader builds the terms of any not resident before it can start.
  engine::Selection adapters;
  bool adapters_ready = false;      // set by the scheduler (under its lock) once every pick is built
  bool cache_prompt = true;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::atomic<bool> cancelled{false};
  // OpenAI's n > 1: choice `index` of a request whose choice 0 is `leader` (same prompt, adapters
  // and channel). A follower starts once the leader has evaluated the prompt, and copies that KV
  // from the leader's slot instead of evaluating it again (all but the last prompt token).
  int index = 0;
  std::shared_ptr<CompletionJob> leader;
  std::shared_ptr<JobChannel> channel = std::make_shared<JobChannel>();

  void push(JobEvent e) {
    e.index = index;
    channel->push(std::move(e));
  }
  bool pop(JobEvent& out, std::chrono::milliseconds wait) { return channel->pop(out, wait); }
};

}  // namespace graft::server

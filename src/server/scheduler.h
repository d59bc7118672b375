// The server's scheduler: N slots, each with its own KV cache, and one thread that runs the
// engine's batching step over every active slot (continuous batching: a request joins the next
// step after it is admitted and leaves when it stops). Requests with different adapters and scales
// share each step. Requests beyond the slots wait in a bounded queue.
//
// Prompt cache: a slot keeps the tokens whose KV it holds and the digest of the adapter set that
// computed them. A new request goes to a free slot that loses nothing (empty, or holding a prefix
// of its prompt), else to the free slot sharing its longest token prefix under the same digest;
// the longest prefix any slot holds under that digest is copied in, and only the rest of its
// prompt is evaluated. KV computed under other adapters or scales is never reused.
//
// KV-cache events (--kv-events): after every change of a slot's KV the scheduler reports the slot's
// tokens to a KvBlockTracker (kv_blocks.h) and publishes what changed, one batch per step.
//
// Adapters not resident when a request arrives are built by the scheduler's loader thread while the
// request waits in the queue (counted as waiting); the batching thread keeps stepping the others.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "graft/engine/engine.h"
#include "server/job.h"
#include "server/kv_blocks.h"
#include "server/kv_events.h"

namespace graft::server {

struct SchedulerOptions {
  int parallel = 4;           // slots
  int64_t slot_ctx = 2048;    // context of each slot, tokens
  int64_t batch_tokens = 512; // rows of one step at most (decoding rows always run)
  size_t queue_size = 64;     // waiting requests beyond the slots
  DType cache_type = runtime::kDefaultKVCacheType;  // KV cache storage of each slot
  int64_t kv_block_size = 16;                       // tokens per reported block (--kv-block-size)
  KvEventPublisher* kv_events = nullptr;            // --kv-events (not owned); null: none
};

// What /metrics and /slots read (a consistent snapshot).
struct SchedulerStats {
  int64_t prompt_tokens_total = 0, predicted_tokens_total = 0;
  double prompt_seconds_total = 0, predicted_seconds_total = 0;
  int64_t steps_total = 0, mixed_steps_total = 0;  // mixed: rows under more than one adapter set
  int64_t requests_total = 0, requests_cancelled = 0;
  int64_t processing = 0, deferred = 0;
  int64_t kv_tokens = 0, kv_capacity = 0, n_tokens_max = 0;
  int64_t kv_block_size = 0;  // tokens per block in KV events and vllm:cache_config_info
  // Adapter names (non-zero scale) of the requests in slots, and of those in the queue.
  std::vector<std::string> running_adapters, waiting_adapters;
  int64_t waiting_for_adapter = 0;  // queued requests whose adapters are being built
  struct AdapterCounters {  // names come from the registry when printed
    int64_t requests = 0, prompt_tokens = 0, generation_tokens = 0;
  };
  std::map<int64_t, AdapterCounters> adapters;  // by adapter id
};

class Scheduler {
 public:
  Scheduler(engine::Engine& engine, SchedulerOptions options);
  ~Scheduler();

  // Queues a job (its adapters already selected; any not resident are built before it starts).
  // Throws kLimit when the queue is full or the scheduler is stopping.
  void submit(std::shared_ptr<CompletionJob> job);
  // Stops admitting, cancels queued and running jobs (each gets its final event), joins.
  void stop();

  SchedulerStats stats() const;
  // After an adapter is unloaded or reloaded in place: drops the per-adapter counters of adapters
  // no longer registered, and the cached KV of idle slots computed with an adapter no longer
  // registered with the same content (a request still running with one drops both when it ends).
  void adapters_changed();
  const SchedulerOptions& options() const { return opts_; }

 private:
  struct Slot {
    std::unique_ptr<runtime::KVCache> cache;
    std::vector<int32_t> cached;  // tokens whose KV the cache holds
    engine::Digest digest{};
    LoraTag lora;  // the adapters that computed the KV, as KV events name them
    std::vector<std::pair<int64_t, engine::Digest>> contents;  // their ids and content digests
    std::shared_ptr<CompletionJob> job;
    std::unique_ptr<engine::Sequence> seq;
    int64_t last_used = 0;
  };
  void loop();
  void load_loop();  // builds the adapters of queued jobs that wait for them
  void admit(std::unique_lock<std::mutex>& lock);
  void start(size_t slot, std::shared_ptr<CompletionJob> job);
  // The tokens whose KV a slot holds (a running slot's history as far as evaluated).
  static std::vector<int32_t> held_tokens(const Slot& s);
  // A later choice of an n > 1 request whose first has not evaluated its prompt yet.
  bool waits_for_leader(const CompletionJob& job) const;
  // Sends the final event and frees the slot; `why` makes it an error (timeout, shutdown).
  void finish(size_t slot, const char* why = nullptr);
  void fail_active(const std::exception& e);
  // Forgets the cached KV of a free slot whose adapters are no longer registered as they were.
  void drop_if_stale(Slot& s, const std::vector<engine::AdapterInfo>& registered);
  void report_blocks(size_t slot);  // the slot's KV to the block tracker (--kv-events)
  void flush_blocks();              // publishes what report_blocks collected, as one batch

  engine::Engine& engine_;
  SchedulerOptions opts_;
  std::vector<Slot> slots_;
  std::deque<std::shared_ptr<CompletionJob>> queue_;
  std::deque<std::shared_ptr<CompletionJob>> to_load_;  // queued jobs whose adapters are not all built
  std::condition_variable load_cv_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  int64_t clock_ = 0;
  SchedulerStats stats_;
  std::unique_ptr<KvBlockTracker> blocks_;  // with --kv-events
  std::vector<KvBlockEvent> pending_;       // events of the current step
  std::thread thread_, loader_;
};

}  // namespace graft::server

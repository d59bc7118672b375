// KV-cache events in vLLM's wire format over ZeroMQ (--kv-events), for llm-d's precise prefix-cache
// scorer and NVIDIA Dynamo's KV router.
//
// A PUB socket sends each batch as three frames: the topic, an 8-byte big-endian sequence number
// (0, 1, 2, ... with no gaps while the process lives; a restart begins at 0 again), and msgpack
// [ts, [event, ...], 0] (the 0 is vLLM's data-parallel rank) with each event a tagged array (vLLM's msgspec array_like form):
//   ["BlockStored", [hash, ...], parent hash | nil, [token, ...], block_size, lora_id | nil, nil, lora_name | nil]
//   ["BlockRemoved", [hash, ...], nil]
//   ["AllBlocksCleared"]
// (the nil is vLLM's `medium`: graft has one cache tier). The first batch clears all blocks.
// An optional ROUTER socket (--kv-events-replay) answers a request [start seq as 8 bytes big-endian]
// with every buffered batch from there on as [seq, payload] and then [-1 as 8 bytes, ""], as vLLM's
// does; the last 10,000 batches are kept.
//
// Sending runs on the publisher's own thread: the scheduler only encodes and queues.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "server/kv_blocks.h"

namespace graft::server {

struct KvEventOptions {
  std::string endpoint;         // tcp://*:5557 binds (a '*' host, or ipc://); tcp://host:port connects
  std::string replay_endpoint;  // "" none; always bound
  std::string topic;            // vLLM's default is ""; llm-d reads kv@<pod>@<model>
  size_t replay_batches = 10000;
};

// True when `endpoint` is bound rather than connected (vLLM's rule): a '*' or '::' host, or ipc://,
// inproc://.
bool binds(const std::string& endpoint);

class KvEventPublisher {
 public:
  // Opens the sockets now: an endpoint ZeroMQ refuses (malformed, a port in use) throws kBadRequest
  // naming the option. Publishes AllBlocksCleared as batch 0.
  explicit KvEventPublisher(KvEventOptions options);
  ~KvEventPublisher();  // sends what is queued (up to a second), then closes
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // One batch (nothing for an empty list): its sequence number is taken now.
  void publish(const std::vector<KvBlockEvent>& events);

 private:
  void run();
  void serve_replay();
  void close_sockets();

  KvEventOptions opts_;
  void* ctx_ = nullptr;
  void* pub_ = nullptr;
  void* replay_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<uint64_t, std::string>> queue_;   // to send
  std::deque<std::pair<uint64_t, std::string>> buffer_;  // sent, for replay (publisher thread only)
  uint64_t next_seq_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

// The msgpack payload of one batch (exposed for the tests).
std::string encode_kv_batch(double ts, const std::vector<KvBlockEvent>& events);

}  // namespace graft::server

#include "server/kv_events.h"

#include <msgpack.h>
#include <zmq.h>

#include <cerrno>
#include <chrono>

#include "graft/core/error.h"

namespace graft::server {

namespace {

// msgpack-c's growing buffer and packer, freed on every path.
class Packer {
 public:
  Packer() {
    msgpack_sbuffer_init(&buf_);
    msgpack_packer_init(&pk_, &buf_, msgpack_sbuffer_write);
  }
  ~Packer() { msgpack_sbuffer_destroy(&buf_); }
  Packer(const Packer&) = delete;
  Packer& operator=(const Packer&) = delete;
  void array(size_t n) { msgpack_pack_array(&pk_, n); }
  void str(const std::string& s) {
    msgpack_pack_str(&pk_, s.size());
    msgpack_pack_str_body(&pk_, s.data(), s.size());
  }
  void u64(uint64_t v) { msgpack_pack_uint64(&pk_, v); }
  void i64(int64_t v) { msgpack_pack_int64(&pk_, v); }
  void f64(double v) { msgpack_pack_double(&pk_, v); }
  void nil() { msgpack_pack_nil(&pk_); }
  void hashes(const std::vector<uint64_t>& hs) {
    array(hs.size());
    for (uint64_t h : hs) u64(h);
  }
  std::string bytes() const { return std::string(buf_.data, buf_.size); }

 private:
  msgpack_sbuffer buf_;
  msgpack_packer pk_;
};

void pack_event(Packer& p, const KvBlockEvent& e) {
  switch (e.kind) {
    case KvBlockEvent::Kind::kStored:
      p.array(8);
      p.str("BlockStored");
      p.hashes(e.hashes);
      e.parent ? p.u64(*e.parent) : p.nil();
      p.array(e.tokens.size());
      for (int32_t t : e.tokens) p.i64(t);
      p.i64(static_cast<int64_t>(e.tokens.size() / std::max<size_t>(1, e.hashes.size())));
      e.lora.id ? p.i64(*e.lora.id) : p.nil();
      p.nil();  // medium
      e.lora.name.empty() ? p.nil() : p.str(e.lora.name);
      break;
    case KvBlockEvent::Kind::kRemoved:
      p.array(3);
      p.str("BlockRemoved");
      p.hashes(e.hashes);
      p.nil();  // medium
      break;
    case KvBlockEvent::Kind::kAllCleared:
      p.array(1);
      p.str("AllBlocksCleared");
      break;
  }
}

std::string seq_bytes(uint64_t seq) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>(seq >> (8 * (7 - i)));
  return s;
}

// Sends `frames` as one multipart message; false if ZeroMQ would block or failed (PUB drops at its
// high-water mark rather than blocking; a ROUTER reply to a gone peer is dropped too).
bool send_frames(void* socket, const std::vector<std::string>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    const int flags = ZMQ_DONTWAIT | (i + 1 < frames.size() ? ZMQ_SNDMORE : 0);
    if (zmq_send(socket, frames[i].data(), frames[i].size(), flags) < 0) return false;
  }
  return true;
}

std::vector<std::string> recv_frames(void* socket) {
  std::vector<std::string> frames;
  int more = 1;
  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, socket, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&m);
      break;
    }
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
    more = zmq_msg_more(&m);
    zmq_msg_close(&m);
  }
  return frames;
}

}  // namespace

std::string encode_kv_batch(double ts, const std::vector<KvBlockEvent>& events) {
  Packer p;
  p.array(3);
  p.f64(ts);
  p.array(events.size());
  for (const auto& e : events) pack_event(p, e);
  p.i64(0);  // data_parallel_rank: vLLM sends it, llm-d's decoder requires it
  return p.bytes();
}

bool binds(const std::string& endpoint) {
  return endpoint.find('*') != std::string::npos || endpoint.find("::") != std::string::npos ||
         endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0;
}

KvEventPublisher::KvEventPublisher(KvEventOptions options) : opts_(std::move(options)) {
  ctx_ = zmq_ctx_new();
  const auto open = [&](int type, const std::string& endpoint, bool bind, const char* option) {
    void* s = zmq_socket(ctx_, type);
    const int hwm = 100000, linger_ms = 500;
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
    if ((bind ? zmq_bind(s, endpoint.c_str()) : zmq_connect(s, endpoint.c_str())) != 0) {
      const int err = errno;
      zmq_close(s);
      close_sockets();
      const ErrorKind kind = err == EINVAL || err == EPROTONOSUPPORT ? ErrorKind::kBadRequest : ErrorKind::kIo;
      fail_as(kind, option, " '", endpoint, "': cannot ", bind ? "bind" : "connect", ": ", zmq_strerror(err),
              " (expected tcp://*:PORT to bind, tcp://HOST:PORT to connect, or ipc://PATH)");
    }
    return s;
  };
  pub_ = open(ZMQ_PUB, opts_.endpoint, binds(opts_.endpoint), "--kv-events");
  if (!opts_.replay_endpoint.empty()) replay_ = open(ZMQ_ROUTER, opts_.replay_endpoint, true, "--kv-events-replay");
  publish({KvBlockEvent(KvBlockEvent::Kind::kAllCleared)});
  thread_ = std::thread([this] { run(); });
}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  close_sockets();
}

void KvEventPublisher::close_sockets() {
  if (pub_) zmq_close(pub_);
  if (replay_) zmq_close(replay_);
  pub_ = replay_ = nullptr;
  if (ctx_) zmq_ctx_term(ctx_);  // waits at most the sockets' linger (0.5 s) for unsent batches
  ctx_ = nullptr;
}

void KvEventPublisher::publish(const std::vector<KvBlockEvent>& events) {
  if (events.empty()) return;
  const double ts = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string payload = encode_kv_batch(ts, events);
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(next_seq_++, std::move(payload));
  }
  cv_.notify_one();
}

void KvEventPublisher::run() {
  const std::string topic = opts_.topic;
  for (;;) {
    std::deque<std::pair<uint64_t, std::string>> batches;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Wakes for a batch, or every 20 ms to answer replay requests.
      cv_.wait_for(lock, std::chrono::milliseconds(20), [&] { return stopping_ || !queue_.empty(); });
      batches.swap(queue_);
      stop = stopping_;
    }
    for (auto& [seq, payload] : batches) {
      send_frames(pub_, {topic, seq_bytes(seq), payload});  // a drop shows as a gap, as vLLM's
      buffer_.emplace_back(seq, std::move(payload));
      if (buffer_.size() > opts_.replay_batches) buffer_.pop_front();
    }
    if (replay_) serve_replay();
    if (stop) return;
  }
}

void KvEventPublisher::serve_replay() {
  zmq_pollitem_t item{replay_, 0, ZMQ_POLLIN, 0};
  while (zmq_poll(&item, 1, 0) > 0 && (item.revents & ZMQ_POLLIN)) {
    // [identity, "", start] from a REQ or DEALER with its delimiter, or [identity, start].
    std::vector<std::string> f = recv_frames(replay_);
    if (f.size() < 2 || f.size() > 3 || f.back().size() != 8 || (f.size() == 3 && !f[1].empty())) continue;
    uint64_t start = 0;
    for (unsigned char c : f.back()) start = start << 8 | c;
    std::vector<std::string> head{f[0]};
    if (f.size() == 3) head.emplace_back();
    for (const auto& [seq, payload] : buffer_) {
      if (seq < start) continue;
      std::vector<std::string> reply = head;
      reply.push_back(seq_bytes(seq));
      reply.push_back(payload);
      send_frames(replay_, reply);
    }
    std::vector<std::string> end = head;
    end.push_back(std::string(8, '\xff'));  // -1, the end of the replay
    end.emplace_back();
    send_frames(replay_, end);
  }
}

}  // namespace graft::server

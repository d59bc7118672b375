// HTTP connections on a fixed set of worker threads: cpp-httplib's Server, with its accept loop's
// sockets parked between requests instead of each holding a worker until it closes.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <memory>
#include <string>

namespace graft::server {

// cpp-httplib gives every connection a worker thread for its whole life, so a thousand idle
// keep-alive clients need a thousand threads, and a silent or slow client holds one for its read
// timeout. Here a connection holds a worker only while one of its requests is answered. Before that
// (a new connection, a keep-alive one between requests) its socket is parked in one epoll thread,
// which reads what arrives and hands the connection to a worker once a whole request is there: its
// head and, when declared with Content-Length, a body of up to kParkedBodyMax. Parked connections cost
// a file descriptor and their bytes, not a thread; they are closed after the keep-alive timeout
// (nothing sent since the last answer) or the read timeout (a started request that stops arriving).
class HttpServer : public httplib::Server {
 public:
  // Bodies longer than this are read by the worker, as cpp-httplib does, so that a thousand parked
  // clients cannot hold a thousand --body-limit buffers.
  static constexpr size_t kParkedBodyMax = 1u << 20;
  // A request head that has not ended by then goes to a worker, and cpp-httplib refuses it.
  static constexpr size_t kParkedHeadMax = 64u << 10;

  explicit HttpServer(size_t workers);
  ~HttpServer() override;

  // After bind_to_port: the listen backlog. The packaged cpp-httplib is a compiled library, so its
  // CPPHTTPLIB_LISTEN_BACKLOG (5) cannot be set from here; with 5, a burst of connections waits for
  // SYN retransmissions (1 s, then 3 s) whenever the accept loop falls a few connections behind.
  void set_listen_backlog(int backlog);

  struct Connection;
  class Connections;  // the workers and the parking thread: the task queue of httplib's accept loop

 private:
  bool process_and_close_socket(socket_t sock) override;  // called by the accept loop: parks it
  void serve(std::unique_ptr<Connection> c);              // on a worker: answers what has arrived

  size_t workers_;
  Connections* connections_ = nullptr;  // owned by httplib's listen loop (new_task_queue)
};

// Whether `bytes` (what a connection has sent since its last answered request) hold a request a
// worker can answer without waiting on the client: see HttpServer. Exposed for the tests.
bool request_has_arrived(const std::string& bytes);

}  // namespace graft::server

// The worker pool and the parking thread behind HttpServer (connections.h).
//
// Life of a connection: httplib's accept loop calls process_and_close_socket, which parks the new
// socket. The parking thread (epoll) appends whatever arrives to the connection's bytes; when
// request_has_arrived, the connection leaves epoll and joins the workers' queue. A worker answers the
// request through httplib's own process_request, reading from those bytes first, then the socket.
// Bytes read past the request (a pipelined next one) stay with the connection: a whole next request
// is answered at once, anything less parks the connection again.
#include "server/connections.h"

#include <netdb.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace graft::server {

using Clock = std::chrono::steady_clock;

struct HttpServer::Connection {
  int fd;
  std::string bytes;        // received and not yet read by a request: the next request's start
  size_t served = 0;        // requests answered on this connection
  Clock::time_point deadline;
};

namespace {

void close_socket(int fd) {
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
}

int wait_for(int fd, short events, int64_t ms) {
  pollfd p{fd, events, 0};
  int r;
  do r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, INT32_MAX)));
  while (r < 0 && errno == EINTR);
  return r;
}

int64_t millis(time_t sec, time_t usec) { return static_cast<int64_t>(sec) * 1000 + usec / 1000; }

// A peer that has closed its end reads as end-of-file: nothing to write to any more.
bool peer_open(int fd) {
  if (wait_for(fd, POLLIN, 0) == 0) return true;
  char c;
  return ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

void address_of(int fd, bool remote, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t n = sizeof(a);
  const int r = remote ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &n)
                       : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (r != 0 || ::getnameinfo(reinterpret_cast<sockaddr*>(&a), n, host, sizeof(host), serv, sizeof(serv),
                              NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return;
  }
  ip = host;
  port = std::atoi(serv);
}

// httplib's Stream over a connection: reads take the connection's received bytes first, then the
// socket (each wait bounded by the read timeout); bytes read and not consumed stay in c.bytes.
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(HttpServer::Connection& c, int64_t read_ms, int64_t write_ms)
      : c_(c), read_ms_(read_ms), write_ms_(write_ms) {}
  ~ConnectionStream() override { c_.bytes.erase(0, pos_); }

  bool is_readable() const override { return pos_ < c_.bytes.size() || wait_for(c_.fd, POLLIN, read_ms_) > 0; }
  bool is_writable() const override { return wait_for(c_.fd, POLLOUT, write_ms_) > 0 && peer_open(c_.fd); }

  ssize_t read(char* ptr, size_t size) override {
    if (pos_ == c_.bytes.size()) {
      c_.bytes.clear();
      pos_ = 0;
      if (wait_for(c_.fd, POLLIN, read_ms_) <= 0) return -1;
      char buf[16384];
      ssize_t n;
      do n = ::recv(c_.fd, buf, sizeof(buf), 0);
      while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      c_.bytes.assign(buf, static_cast<size_t>(n));
    }
    const size_t n = std::min(size, c_.bytes.size() - pos_);
    std::memcpy(ptr, c_.bytes.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do n = ::send(c_.fd, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(c_.fd, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(c_.fd, false, ip, port); }
  socket_t socket() const override { return c_.fd; }

 private:
  HttpServer::Connection& c_;
  size_t pos_ = 0;  // c_.bytes[0, pos_) have been read
  int64_t read_ms_, write_ms_;
};

bool starts_with_nocase(std::string_view line, std::string_view prefix) {
  return line.size() >= prefix.size() &&
         std::equal(prefix.begin(), prefix.end(), line.begin(), [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); });
}

}  // namespace

bool request_has_arrived(const std::string& bytes) {
  size_t end = bytes.find("\r\n\r\n");
  size_t sep = 4;
  if (end == std::string::npos) {
    end = bytes.find("\n\n");
    sep = 2;
  }
  if (end == std::string::npos) return bytes.size() >= HttpServer::kParkedHeadMax;
  size_t body = 0;
  for (size_t at = bytes.find('\n'); at < end; at = bytes.find('\n', at + 1)) {
    const std::string_view line(bytes.data() + at + 1, std::min(bytes.find('\n', at + 1), end) - at - 1);
    // A worker reads what is streamed or awaited (chunked bodies, Expect: 100-continue) itself.
    if (starts_with_nocase(line, "transfer-encoding:") || starts_with_nocase(line, "expect:")) return true;
    if (starts_with_nocase(line, "content-length:")) {
      char* stop = nullptr;
      const unsigned long long n = std::strtoull(line.data() + 15, &stop, 10);
      if (stop == line.data() + 15 || n > HttpServer::kParkedBodyMax) return true;  // httplib judges it
      body = static_cast<size_t>(n);
    }
  }
  return bytes.size() >= end + sep + body;
}

// The task queue httplib's accept loop feeds, and where parked connections wait. enqueue() runs the
// accept loop's job at once: that job is process_and_close_socket, which only parks the socket.
class HttpServer::Connections final : public httplib::TaskQueue {
 public:
  Connections(HttpServer& server, size_t workers) : server_(server) {
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake_;
    ::epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &ev);
    parker_ = std::thread([this] { park_loop(); });
    for (size_t i = 0; i < workers; ++i) workers_.emplace_back([this] { work_loop(); });
  }
  ~Connections() override {
    ::close(epoll_);
    ::close(wake_);
  }

  void enqueue(std::function<void()> fn) override { fn(); }

  // Parked connections are closed; queued ones are still answered (with Connection: close).
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(park_mu_);
      stopping_ = true;
      for (auto& [fd, c] : parked_) close_socket(fd);
      parked_.clear();
    }
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t w = ::write(wake_, &one, sizeof(one));
    parker_.join();
    {
      std::lock_guard<std::mutex> lock(work_mu_);
      work_stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  void park(std::unique_ptr<Connection> c) {
    std::lock_guard<std::mutex> lock(park_mu_);
    if (stopping_) return close_socket(c->fd);
    const int fd = c->fd;
    c->deadline = Clock::now() + timeout(c->bytes.empty());
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) != 0) return close_socket(fd);
    parked_[fd] = std::move(c);
  }

 private:
  // Nothing sent since the last answer: the keep-alive timeout. A request under way: the read timeout.
  Clock::duration timeout(bool idle) const {
    const int64_t ms = idle ? static_cast<int64_t>(server_.keep_alive_timeout_sec_) * 1000
                            : millis(server_.read_timeout_sec_, server_.read_timeout_usec_);
    return std::chrono::milliseconds(std::max<int64_t>(ms, 1));
  }

  void park_loop() {
    std::vector<epoll_event> events(256);
    std::vector<char> buf(64u << 10);
    auto next_sweep = Clock::now();
    for (;;) {
      const int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), 250);
      std::lock_guard<std::mutex> lock(park_mu_);
      if (stopping_) return;
      for (int i = 0; i < n; ++i) {
        auto it = parked_.find(events[static_cast<size_t>(i)].data.fd);
        if (it != parked_.end()) receive(it, buf);
      }
      const auto now = Clock::now();
      if (now < next_sweep) continue;
      next_sweep = now + std::chrono::milliseconds(250);
      for (auto it = parked_.begin(); it != parked_.end();) {
        if (now < it->second->deadline) {
          ++it;
          continue;
        }
        close_socket(it->first);  // also leaves epoll
        it = parked_.erase(it);
      }
    }
  }

  using Parked = std::unordered_map<int, std::unique_ptr<Connection>>;

  void receive(Parked::iterator it, std::vector<char>& buf) {
    Connection& c = *it->second;
    const ssize_t n = ::recv(c.fd, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) {  // closed by the client, or broken
      close_socket(c.fd);
      parked_.erase(it);
      return;
    }
    c.bytes.append(buf.data(), static_cast<size_t>(n));
    c.deadline = Clock::now() + timeout(false);
    if (!request_has_arrived(c.bytes)) return;
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, c.fd, nullptr);
    auto ready = std::move(it->second);
    parked_.erase(it);
    run(std::move(ready));
  }

  void run(std::unique_ptr<Connection> c) {
    {
      std::lock_guard<std::mutex> lock(work_mu_);
      ready_.push_back(std::move(c));
    }
    work_cv_.notify_one();
  }

  void work_loop() {
    for (;;) {
      std::unique_ptr<Connection> c;
      {
        std::unique_lock<std::mutex> lock(work_mu_);
        work_cv_.wait(lock, [&] { return work_stop_ || !ready_.empty(); });
        if (ready_.empty()) return;
        c = std::move(ready_.front());
        ready_.pop_front();
      }
      server_.serve(std::move(c));
    }
  }

  HttpServer& server_;
  int epoll_ = -1, wake_ = -1;
  std::thread parker_;
  std::vector<std::thread> workers_;

  std::mutex park_mu_;  // parked_, stopping_
  Parked parked_;
  bool stopping_ = false;

  std::mutex work_mu_;  // ready_, work_stop_
  std::condition_variable work_cv_;
  std::deque<std::unique_ptr<Connection>> ready_;
  bool work_stop_ = false;
};

HttpServer::HttpServer(size_t workers) : workers_(std::max<size_t>(workers, 1)) {
  new_task_queue = [this] {
    connections_ = new Connections(*this, workers_);
    return connections_;
  };
}

HttpServer::~HttpServer() = default;

void HttpServer::set_listen_backlog(int backlog) {
  if (::listen(svr_sock_, backlog) != 0) return;  // a listening socket takes a new backlog
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  auto c = std::make_unique<Connection>();
  c->fd = sock;
  connections_->park(std::move(c));
  return true;
}

void HttpServer::serve(std::unique_ptr<Connection> c) {
  for (;;) {
    const bool last = ++c->served >= keep_alive_max_count_ || svr_sock_ == INVALID_SOCKET;
    bool closed = false;
    bool ok;
    {
      ConnectionStream s(*c, millis(read_timeout_sec_, read_timeout_usec_), millis(write_timeout_sec_, write_timeout_usec_));
      ok = process_request(s, last, closed, nullptr);
    }
    if (!ok || closed || last || svr_sock_ == INVALID_SOCKET) return close_socket(c->fd);
    if (!request_has_arrived(c->bytes)) return connections_->park(std::move(c));
  }
}

}  // namespace graft::server

// ThreadPool: persistent workers that spin briefly and then sleep on a futex-backed atomic wait.
//
// A parallel_for publishes one job: the range [0, n) cut into `n_chunks` fixed chunks (the cut
// depends only on n, grain and the pool size, never on timing). Every thread, the caller included,
// claims chunks from one shared word holding (generation, chunk count, next chunk), so a worker
// that wakes late for an old job can never claim a chunk of a newer one, nor a chunk past the end
// of its own: every decision comes from that word, and a successful compare-and-swap on it proves
// the job (and so the fn/n it read before) is still the current one. The caller returns when every chunk has finished, without waiting for sleeping workers
// to wake; a late worker finds nothing left and goes back to waiting.
#include "graft/core/thread_pool.h"

#include "graft/core/error.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace graft {

namespace {
// How long an idle worker polls for the next job before it sleeps. Decode issues a parallel_for
// every few microseconds, so workers stay hot across a whole token; an idle pool sleeps after this.
constexpr auto kSpin = std::chrono::microseconds(200);

thread_local const void* tl_running_pool = nullptr;  // pool whose chunk this thread is running
}  // namespace

struct ThreadPool::Impl {
  int n_threads = 1;
  std::vector<std::thread> workers;

  std::mutex dispatch_mu;  // one parallel_for at a time per pool (callers from several threads)

  // The current job. Written by the dispatcher before it bumps `claim`/`gen`; read by workers only
  // after they observe the new generation, and only used if their claim on `claim` succeeds.
  std::atomic<const std::function<void(int64_t, int64_t)>*> fn{nullptr};
  std::atomic<int64_t> n{0};

  std::atomic<uint64_t> claim{0};  // generation << 32 | chunk count << 16 | next chunk index
  alignas(64) std::atomic<int64_t> done{0};  // chunks finished in the current job
  alignas(64) std::atomic<uint32_t> gen{0};  // bumped once per job; workers wait on it
  std::atomic<int> sleepers{0};
  std::atomic<bool> stop{false};

  std::mutex err_mu;
  std::exception_ptr err;
  int64_t err_chunk = -1;

  static int64_t chunk_begin(int64_t n, int64_t chunks, int64_t i) { return n * i / chunks; }

  // Claims and runs chunks of generation g until none is left. Returns when the counter has moved
  // past g or every chunk is claimed.
  void run_chunks(uint32_t g) {
    const auto* f = fn.load(std::memory_order_acquire);
    const int64_t nn = n.load(std::memory_order_acquire);
    uint64_t cur = claim.load(std::memory_order_acquire);
    for (;;) {
      if (static_cast<uint32_t>(cur >> 32) != g) return;
      const int64_t nc = static_cast<int64_t>((cur >> 16) & 0xffffu);
      const int64_t i = static_cast<int64_t>(cur & 0xffffu);
      if (i >= nc) return;
      if (!claim.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire))
        continue;
      const void* prev = tl_running_pool;
      tl_running_pool = this;
      try {
        (*f)(chunk_begin(nn, nc, i), chunk_begin(nn, nc, i + 1));
      } catch (...) {
        std::lock_guard<std::mutex> lk(err_mu);
        if (!err || i < err_chunk) {  // keep the lowest chunk's error: deterministic
          err = std::current_exception();
          err_chunk = i;
        }
      }
      tl_running_pool = prev;
      done.fetch_add(1, std::memory_order_acq_rel);
      cur = claim.load(std::memory_order_acquire);
    }
  }

  void worker_loop() {
    uint32_t seen = gen.load(std::memory_order_acquire);
    for (;;) {
      uint32_t g = gen.load(std::memory_order_acquire);
      if (g == seen) {
        auto t0 = std::chrono::steady_clock::now();
        for (int it = 0;; ++it) {
          _mm_pause();
          g = gen.load(std::memory_order_acquire);
          if (g != seen || stop.load(std::memory_order_relaxed)) break;
          if ((it & 63) == 63 && std::chrono::steady_clock::now() - t0 > kSpin) break;
        }
        while (g == seen && !stop.load(std::memory_order_acquire)) {
          sleepers.fetch_add(1, std::memory_order_seq_cst);
          gen.wait(seen, std::memory_order_seq_cst);
          sleepers.fetch_sub(1, std::memory_order_relaxed);
          g = gen.load(std::memory_order_acquire);
        }
      }
      if (stop.load(std::memory_order_acquire)) return;
      seen = g;
      run_chunks(g);
    }
  }

  void wake_all() {
    if (sleepers.load(std::memory_order_seq_cst) > 0) gen.notify_all();
  }
};

ThreadPool::ThreadPool(int n_threads) : impl_(std::make_unique<Impl>()) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads = std::min(n_threads, 4096);  // chunk indices live in 16 bits of the claim word
  impl_->n_threads = n_threads;
  impl_->workers.reserve(static_cast<size_t>(n_threads - 1));
  try {
    for (int i = 1; i < n_threads; ++i) impl_->workers.emplace_back([this] { impl_->worker_loop(); });
  } catch (const std::system_error& e) {
    // The OS refused a thread (limits, memory): stop those started, then say so.
    const size_t started = impl_->workers.size();
    impl_->stop.store(true, std::memory_order_seq_cst);
    impl_->gen.fetch_add(1, std::memory_order_seq_cst);
    impl_->gen.notify_all();
    for (auto& t : impl_->workers) t.join();
    fail_as(ErrorKind::kIo, "cannot start worker thread ", started + 2, " of ", n_threads, ": ", e.what(),
            " (try fewer --threads)");
  }
}

ThreadPool::~ThreadPool() {
  impl_->stop.store(true, std::memory_order_seq_cst);
  impl_->gen.fetch_add(1, std::memory_order_seq_cst);
  impl_->gen.notify_all();
  for (auto& t : impl_->workers) t.join();
}

int ThreadPool::size() const { return impl_->n_threads; }

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t grain, int chunks_per_thread) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  Impl& p = *impl_;
  // Fixed cut: chunks_per_thread chunks a thread, but none smaller than `grain` (except a lone
  // chunk), and at most 0xffff (the claim word's 16 bits); one thread runs the range in one call.
  const int64_t per_thread = p.n_threads > 1 ? std::max(1, chunks_per_thread) : 1;
  int64_t chunks = std::min<int64_t>({int64_t{p.n_threads} * per_thread, n / grain, 0xffff});
  if (chunks <= 1 || tl_running_pool == &p) {
    // One chunk, or a nested call from inside this pool's own work: run here, in order.
    if (chunks <= 1) {
      fn(0, n);
    } else {
      for (int64_t i = 0; i < chunks; ++i) fn(Impl::chunk_begin(n, chunks, i), Impl::chunk_begin(n, chunks, i + 1));
    }
    return;
  }

  std::lock_guard<std::mutex> lk(p.dispatch_mu);
  p.err = nullptr;
  p.err_chunk = -1;
  p.fn.store(&fn, std::memory_order_release);
  p.n.store(n, std::memory_order_release);
  p.done.store(0, std::memory_order_relaxed);
  const uint32_t g = p.gen.load(std::memory_order_relaxed) + 1;
  p.claim.store(static_cast<uint64_t>(g) << 32 | static_cast<uint64_t>(chunks) << 16,
                std::memory_order_release);
  p.gen.store(g, std::memory_order_seq_cst);
  p.wake_all();

  p.run_chunks(g);
  for (int it = 0; p.done.load(std::memory_order_acquire) < chunks; ++it) {
    _mm_pause();
    if (it > 4096) std::this_thread::yield();  // a worker was descheduled: don't burn its core
  }
  if (p.err) std::rethrow_exception(p.err);
}

}  // namespace graft

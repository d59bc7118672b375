// A fixed pool of worker threads for data-parallel loops. Built once by the application and passed
// down explicitly (never a global), so a server can give different jobs different pools.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

namespace graft {

class ThreadPool {
 public:
  // n_threads <= 0 means all hardware threads. The calling thread takes part in the work.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;
  // Splits [0, n) into contiguous chunks, at least `grain` items each, and runs fn(begin, end) on
  // them across the pool; returns when all are done. Exceptions from fn are rethrown (the first).
  // chunks_per_thread > 1 cuts finer (still never below `grain`): threads claim chunks as they
  // finish, so a thread slowed by something else on its core (a VM's neighbour, another process)
  // leaves its share to the others instead of holding every thread at the end of the job. The cut
  // still depends only on n, grain, the pool size and chunks_per_thread, never on timing.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1,
                    int chunks_per_thread = 1);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace graft

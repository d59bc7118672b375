#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "graft/core/thread_pool.h"

namespace graft {
namespace {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

Ranges run(ThreadPool& pool, int64_t n, int64_t grain = 1, int per_thread = 1) {
  std::mutex mu;
  Ranges got;
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lk(mu);
    got.emplace_back(b, e);
  }, grain, per_thread);
  std::sort(got.begin(), got.end());
  return got;
}

TEST(ThreadPool, CoversEveryIndexOnceInFixedChunks) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {1, 2, 3, 4, 7, 100, 1001}) {
      for (int64_t grain : {1, 3, 64}) {
        const Ranges r = run(pool, n, grain);
        int64_t at = 0;
        for (auto [b, e] : r) {
          EXPECT_EQ(b, at);
          EXPECT_LT(b, e);
          if (r.size() > 1) {
            EXPECT_GE(e - b, grain);
          }
          at = e;
        }
        EXPECT_EQ(at, n);
        EXPECT_LE(static_cast<int64_t>(r.size()), threads);
        EXPECT_EQ(r, run(pool, n, grain)) << "the cut must not depend on timing";
      }
    }
  }
}

// A finer cut (matmul's, so that a slowed thread leaves its rest to the others): every index once,
// chunks no smaller than the grain, per_thread chunks a thread where n allows, one call on one thread,
// and the same cut every time.
TEST(ThreadPool, FinerCutPerThread) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 5, 16, 100, 1001}) {
      for (int64_t grain : {1, 7}) {
        const Ranges r = run(pool, n, grain, 4);
        int64_t at = 0;
        for (auto [b, e] : r) {
          EXPECT_EQ(b, at);
          if (r.size() > 1) {
            EXPECT_GE(e - b, grain);
          }
          at = e;
        }
        EXPECT_EQ(at, n);
        const int64_t want = threads == 1 ? 1 : std::max<int64_t>(1, std::min<int64_t>(4 * threads, n / grain));
        EXPECT_EQ(static_cast<int64_t>(r.size()), want) << threads << " threads, n " << n << ", grain " << grain;
        EXPECT_EQ(r, run(pool, n, grain, 4)) << "the cut must not depend on timing";
      }
    }
  }
}

TEST(ThreadPool, FewerItemsThanThreadsAndZero) {
  ThreadPool pool(4);
  EXPECT_EQ(run(pool, 2), (Ranges{{0, 1}, {1, 2}}));
  EXPECT_EQ(run(pool, 1), (Ranges{{0, 1}}));
  bool called = false;
  pool.parallel_for(0, [&](int64_t, int64_t) { called = true; });
  pool.parallel_for(-3, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
}

TEST(ThreadPool, UsesWorkerThreads) {
  ThreadPool pool(2);
  std::set<std::thread::id> ids;
  std::mutex mu;
  for (int rep = 0; rep < 200 && ids.size() < 2; ++rep)
    pool.parallel_for(2, [&](int64_t, int64_t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::lock_guard<std::mutex> lk(mu);
      ids.insert(std::this_thread::get_id());
    });
  EXPECT_EQ(ids.size(), 2u);
}

TEST(ThreadPool, RethrowsTheLowestChunksException) {
  ThreadPool pool(3);
  for (int rep = 0; rep < 50; ++rep) {
    std::atomic<int> ran{0};
    try {
      pool.parallel_for(3, [&](int64_t b, int64_t) {
        ran++;
        if (b >= 1) throw std::runtime_error("chunk " + std::to_string(b));
      });
      FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "chunk 1");
    }
    EXPECT_EQ(ran.load(), 3);  // every chunk still ran; the pool stays usable
  }
  EXPECT_THROW(pool.parallel_for(1, [](int64_t, int64_t) { throw std::logic_error("x"); }), std::logic_error);
  EXPECT_EQ(run(pool, 3).size(), 3u);
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      pool.parallel_for(10, [&](int64_t b2, int64_t e2) { sum += (e2 - b2) * (i + 1); });
  });
  EXPECT_EQ(sum.load(), 10 * (1 + 2 + 3 + 4));
}

TEST(ThreadPool, ManyQuickCallsAndConcurrentCallers) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  auto body = [&] {
    for (int rep = 0; rep < 3000; ++rep)
      pool.parallel_for(7, [&](int64_t b, int64_t e) { total += e - b; });
  };
  std::thread other(body);
  body();
  other.join();
  EXPECT_EQ(total.load(), 2 * 3000 * 7);
}

TEST(ThreadPool, IdleWorkersSleepAndWakeUp) {
  ThreadPool pool(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the spin: workers sleep
  for (int rep = 0; rep < 20; ++rep) {
    EXPECT_EQ(run(pool, 2).size(), 2u);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace
}  // namespace graft

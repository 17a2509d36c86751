#include "base/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace kvserve {
namespace {

TEST(ThreadPoolTest, HardwareThreadsPositive) { EXPECT_GE(ThreadPool::HardwareThreads(), 1); }

TEST(ThreadPoolTest, ParallelForCoversEachItemOnceWithAlignedChunks) {
  for (int threads : {1, 2, 3, 4, 7}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 3, 5, 31, 32, 33, 100, 1000, 4097}) {
      for (int64_t grain : {1, 3, 8, 64}) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int> num_calls{0};
        std::atomic<bool> misaligned{false};
        pool.ParallelFor(n, grain, [&](int64_t begin, int64_t end) {
          num_calls.fetch_add(1);
          if (begin % grain != 0 || (end != n && (end - begin) % grain != 0)) {
            misaligned.store(true);
          }
          for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(hits[i].load(), 1) << "threads=" << threads << " n=" << n << " i=" << i;
        }
        EXPECT_LE(num_calls.load(), threads * 4);
        EXPECT_FALSE(misaligned.load()) << "n=" << n << " grain=" << grain;
      }
    }
  }
}

// Chunks differ by at most one grain, so that no thread is left a long last chunk (a 576-row
// matmul in 16-row panels is 36 grains: eight chunks of 4 or 5, not seven of 5 and one of 1).
TEST(ThreadPoolTest, ParallelForBalancesChunksToWithinOneGrain) {
  ThreadPool pool(2);
  for (int64_t n : {36 * 16, 12 * 16, 1536, 1000, 77}) {
    for (int64_t grain : {1, 16}) {
      std::mutex mu;
      std::vector<int64_t> sizes;
      pool.ParallelFor(n, grain, [&](int64_t begin, int64_t end) {
        std::lock_guard<std::mutex> lock(mu);
        sizes.push_back(end - begin);
      });
      const int64_t num_grains = (n + grain - 1) / grain;
      if (num_grains < 2) continue;
      ASSERT_FALSE(sizes.empty());
      std::sort(sizes.begin(), sizes.end());
      // The last chunk may hold a partial grain; compare whole grains.
      const int64_t smallest_grains = (sizes.front() + grain - 1) / grain;
      const int64_t largest_grains = sizes.back() / grain;
      EXPECT_LE(largest_grains - smallest_grains, 1) << "n=" << n << " grain=" << grain;
    }
  }
}

TEST(ThreadPoolTest, RunOnAllRunsEachIndexOnce) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(4);
  pool.RunOnAll([&](int i) { hits[i].fetch_add(1); });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPoolTest, ManyBackToBackCalls) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    int64_t total = 0;
    std::vector<int64_t> partial(threads);
    for (int iter = 0; iter < 5000; ++iter) {
      std::fill(partial.begin(), partial.end(), 0);
      pool.RunOnAll([&](int i) { partial[i] = i + iter; });
      for (int i = 0; i < threads; ++i) total += partial[i];
    }
    int64_t expected = 0;
    for (int iter = 0; iter < 5000; ++iter) {
      for (int i = 0; i < threads; ++i) expected += i + iter;
    }
    EXPECT_EQ(total, expected);
  }
}

TEST(ThreadPoolTest, WakesUpAfterWorkersSleep) {
  ThreadPool pool(3);
  for (int iter = 0; iter < 5; ++iter) {
    // Longer than the spin window, so workers are blocked on the condition variable.
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    std::atomic<int> sum{0};
    pool.ParallelFor(300, 1, [&](int64_t b, int64_t e) { sum.fetch_add(static_cast<int>(e - b)); });
    EXPECT_EQ(sum.load(), 300);
  }
}

TEST(ThreadPoolTest, CallerWaitsForSlowWorker) {
  ThreadPool pool(2);
  std::atomic<int> done{0};
  pool.RunOnAll([&](int i) {
    if (i == 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    done.fetch_add(1);
  });
  EXPECT_EQ(done.load(), 2);
}

// A slow (or descheduled) worker must not hold the caller up: the caller claims every chunk
// the worker has not started.
TEST(ThreadPoolTest, CallerRunsChunksALateWorkerDidNotClaim) {
  ThreadPool pool(2);
  std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> by_caller{0};
  std::atomic<int> total{0};
  pool.ParallelFor(8, 1, [&](int64_t b, int64_t e) {
    if (std::this_thread::get_id() != caller) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a slow worker
    } else {
      by_caller.fetch_add(static_cast<int>(e - b));
    }
    total.fetch_add(static_cast<int>(e - b));
  });
  EXPECT_EQ(total.load(), 8);
  // Each chunk costs the worker 50 ms and the caller nothing, so the caller did the bulk.
  EXPECT_GE(by_caller.load(), 4);
}

TEST(ThreadPoolTest, SingleThreadRunsInline) {
  ThreadPool pool(1);
  std::thread::id caller = std::this_thread::get_id();
  bool inline_run = false;
  pool.ParallelFor(10, 1, [&](int64_t, int64_t) { inline_run = std::this_thread::get_id() == caller; });
  EXPECT_TRUE(inline_run);
}

TEST(ThreadPoolTest, DestroyWhileIdle) {
  for (int i = 0; i < 50; ++i) {
    ThreadPool pool(3);
    if (i % 2) pool.RunOnAll([](int) {});
  }
}

}  // namespace
}  // namespace kvserve

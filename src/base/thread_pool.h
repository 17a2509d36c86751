// A fixed pool of worker threads for data-parallel kernels. The calling thread takes part, so
// ThreadPool(1) runs everything inline. Workers spin briefly before sleeping so that the many
// small parallel sections of a decode step (one per matmul) cost microseconds, not a futex
// round trip each.
//
// Thread-safety: one ParallelFor at a time per pool (the engine thread owns the pool).
// ParallelFor calls must not nest.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace kvserve {

class ThreadPool {
 public:
  // num_threads >= 1 counts the caller; num_threads - 1 workers are started.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Splits [0, num_items) into contiguous ranges, at most one per thread, each a multiple of
  // `grain` items except the last, and runs fn(begin, end) on each; returns when all are done.
  void ParallelFor(int64_t num_items, int64_t grain,
                   const std::function<void(int64_t begin, int64_t end)>& fn);

  // Runs fn(thread_index) once on each of the num_threads() threads (caller is index 0).
  void RunOnAll(const std::function<void(int thread_index)>& fn);

  // Number of hardware threads available to this process (sched_getaffinity), at least 1.
  static int HardwareThreads();

 private:
  struct State;
  int num_threads_;
  std::unique_ptr<State> state_;
};

}  // namespace kvserve

// A fixed pool of worker threads for data-parallel kernels. The calling thread takes part, so
// ThreadPool(1) runs everything inline. Workers spin briefly before sleeping so that the many
// small parallel sections of a decode step (one per matmul) cost microseconds, not a futex
// round trip each.
//
// Work is split into several chunks per thread that every thread, the caller included, claims
// from one atomic counter. A worker that the OS has not scheduled (another process is busy on
// the machine) therefore never holds up the caller: the caller runs the unclaimed chunks
// itself and only waits for chunks that were started.
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

  // Splits [0, num_items) into contiguous ranges (a few per thread, for balance), each a
  // multiple of `grain` items except the last, and runs fn(begin, end) on each, on any thread;
  // returns when all are done.
  void ParallelFor(int64_t num_items, int64_t grain,
                   const std::function<void(int64_t begin, int64_t end)>& fn);

  // Runs fn(i) once for each i in [0, num_threads()), each on some thread of the pool; they
  // run concurrently unless a worker is descheduled (then the caller takes its share).
  void RunOnAll(const std::function<void(int thread_index)>& fn);

  // Number of hardware threads available to this process (sched_getaffinity), at least 1.
  static int HardwareThreads();

 private:
  struct State;
  int num_threads_;
  std::unique_ptr<State> state_;
};

}  // namespace kvserve

#include "base/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "base/check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KV_CPU_RELAX() _mm_pause()
#else
#define KV_CPU_RELAX() std::this_thread::yield()
#endif

namespace kvserve {
namespace {

// How long a worker (or the waiting caller) spins before blocking. Decode steps issue one
// parallel section per matmul, tens of microseconds apart, so a short spin keeps dispatch
// off the futex path while a pool that is idle stops burning a core quickly.
constexpr auto kSpinTime = std::chrono::microseconds(100);

}  // namespace

// Shared between the caller and the workers. Dispatch protocol:
//   caller: task = &fn; pending = n - 1; generation += 1 (seq_cst); wake sleepers if any.
//   worker: sees generation change (acquire), runs *task, pending -= 1 (acq_rel); the worker
//           that brings pending to 0 wakes the caller if it is sleeping.
// Sleepers and wakers use the Dekker pattern over seq_cst atomics (num_sleeping / generation,
// caller_sleeping / pending) plus the mutex, so no wakeup is lost.
struct ThreadPool::State {
  std::atomic<uint64_t> generation{0};
  std::atomic<int> pending{0};
  std::atomic<const std::function<void(int)>*> task{nullptr};
  std::atomic<bool> stop{false};
  std::atomic<int> num_sleeping{0};
  std::atomic<bool> caller_sleeping{false};
  std::mutex mu;
  std::condition_variable work_cv;
  std::condition_variable done_cv;
  std::vector<std::thread> workers;

  void WorkerLoop(int index) {
    uint64_t seen = 0;
    for (;;) {
      uint64_t gen = generation.load(std::memory_order_acquire);
      if (gen == seen) {
        auto spin_end = std::chrono::steady_clock::now() + kSpinTime;
        int spins = 0;
        while ((gen = generation.load(std::memory_order_acquire)) == seen &&
               !stop.load(std::memory_order_relaxed)) {
          KV_CPU_RELAX();
          if (++spins % 64 == 0 && std::chrono::steady_clock::now() > spin_end) break;
        }
        if (gen == seen) {
          std::unique_lock<std::mutex> lock(mu);
          num_sleeping.fetch_add(1);
          work_cv.wait(lock, [&] {
            return generation.load() != seen || stop.load();
          });
          num_sleeping.fetch_sub(1);
          gen = generation.load(std::memory_order_acquire);
        }
      }
      if (stop.load(std::memory_order_acquire)) return;
      seen = gen;
      const std::function<void(int)>* fn = task.load(std::memory_order_acquire);
      (*fn)(index);
      if (pending.fetch_sub(1) == 1) {  // seq_cst: pairs with caller_sleeping
        if (caller_sleeping.load()) {
          std::lock_guard<std::mutex> lock(mu);
          done_cv.notify_one();
        }
      }
    }
  }
};

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(std::max(1, num_threads)), state_(std::make_unique<State>()) {
  state_->workers.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) {
    state_->workers.emplace_back([s = state_.get(), i] { s->WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop.store(true);
  }
  state_->work_cv.notify_all();
  for (auto& t : state_->workers) t.join();
}

void ThreadPool::RunOnAll(const std::function<void(int thread_index)>& fn) {
  if (num_threads_ == 1) {
    fn(0);
    return;
  }
  State& s = *state_;
  KV_CHECK(s.pending.load() == 0) << "ParallelFor/RunOnAll must not nest or overlap";
  s.task.store(&fn, std::memory_order_release);
  s.pending.store(num_threads_ - 1, std::memory_order_release);
  s.generation.fetch_add(1);  // seq_cst: pairs with num_sleeping in WorkerLoop
  if (s.num_sleeping.load() > 0) {
    std::lock_guard<std::mutex> lock(s.mu);
    s.work_cv.notify_all();
  }
  fn(0);
  if (s.pending.load(std::memory_order_acquire) == 0) return;
  auto spin_end = std::chrono::steady_clock::now() + kSpinTime;
  int spins = 0;
  while (s.pending.load(std::memory_order_acquire) != 0) {
    KV_CPU_RELAX();
    if (++spins % 64 == 0 && std::chrono::steady_clock::now() > spin_end) {
      std::unique_lock<std::mutex> lock(s.mu);
      s.caller_sleeping.store(true);  // seq_cst: pairs with pending in WorkerLoop
      s.done_cv.wait(lock, [&] { return s.pending.load() == 0; });
      s.caller_sleeping.store(false);
      break;
    }
  }
}

void ThreadPool::ParallelFor(int64_t num_items, int64_t grain,
                             const std::function<void(int64_t begin, int64_t end)>& fn) {
  if (num_items <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t num_grains = (num_items + grain - 1) / grain;
  int64_t num_chunks = std::min<int64_t>(num_threads_, num_grains);
  int64_t grains_per_chunk = (num_grains + num_chunks - 1) / num_chunks;
  num_chunks = (num_grains + grains_per_chunk - 1) / grains_per_chunk;
  if (num_chunks == 1) {
    fn(0, num_items);
    return;
  }
  int64_t chunk_items = grains_per_chunk * grain;
  RunOnAll([&](int thread_index) {
    if (thread_index >= num_chunks) return;
    int64_t begin = thread_index * chunk_items;
    int64_t end = std::min(num_items, begin + chunk_items);
    if (begin < end) fn(begin, end);
  });
}

int ThreadPool::HardwareThreads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace kvserve

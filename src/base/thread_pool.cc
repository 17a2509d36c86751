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

// Chunks per thread: enough that a late or descheduled thread costs little, few enough that
// claiming stays cheap.
constexpr int64_t kChunksPerThread = 4;

// The dispatch word packs [generation:32][num_chunks:16][next_chunk:16]. Claiming a chunk is a
// CAS on the whole word, so a worker holding a word of an earlier section can never claim a
// chunk of a later one.
constexpr int64_t kMaxChunks = 0xffff;
uint64_t Pack(uint64_t gen, uint64_t num_chunks, uint64_t next) {
  return gen << 32 | num_chunks << 16 | next;
}
int64_t NumChunks(uint64_t w) { return static_cast<int64_t>((w >> 16) & 0xffff); }
int64_t NextChunk(uint64_t w) { return static_cast<int64_t>(w & 0xffff); }
uint64_t Generation(uint64_t w) { return w >> 32; }

}  // namespace

// Shared between the caller and the workers. Protocol of one parallel section:
//   caller: task = &fn; done = 0; work = Pack(gen + 1, n, 0) (seq_cst); wake sleepers; claim
//           chunks like a worker; wait until done == n.
//   worker: claim chunk c by CAS(work: w -> w + 1) while NextChunk(w) < NumChunks(w); run
//           task(c); done += 1 (release); the increment that completes the section wakes a
//           sleeping caller.
// The caller changes `task` only after done == n, and a worker reads `task` only after a
// successful claim, so it always runs the current section's function.
// Sleepers and wakers use the Dekker pattern over seq_cst atomics (num_sleeping / work,
// caller_sleeping / done) plus the mutex, so no wakeup is lost.
struct ThreadPool::State {
  std::atomic<uint64_t> work{0};
  std::atomic<int64_t> done{0};
  std::atomic<const std::function<void(int64_t)>*> task{nullptr};
  std::atomic<bool> stop{false};
  std::atomic<int> num_sleeping{0};
  std::atomic<bool> caller_sleeping{false};
  std::mutex mu;
  std::condition_variable work_cv;
  std::condition_variable done_cv;
  std::vector<std::thread> workers;

  // Claims and runs chunks of the section in `w` until none is left. Returns the last word seen.
  uint64_t RunChunks(uint64_t w) {
    while (NextChunk(w) < NumChunks(w)) {
      if (!work.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        continue;  // w was reloaded
      }
      (*task.load(std::memory_order_relaxed))(NextChunk(w));
      int64_t finished = done.fetch_add(1) + 1;  // seq_cst: pairs with caller_sleeping
      if (finished == NumChunks(w) && caller_sleeping.load()) {
        std::lock_guard<std::mutex> lock(mu);
        done_cv.notify_one();
      }
      w = work.load(std::memory_order_acquire);
    }
    return w;
  }

  void WorkerLoop() {
    uint64_t w = work.load(std::memory_order_acquire);
    while (!stop.load(std::memory_order_acquire)) {
      w = RunChunks(w);
      // Nothing to claim: wait for the next section.
      const uint64_t seen = w;
      auto spin_end = std::chrono::steady_clock::now() + kSpinTime;
      int spins = 0;
      while ((w = work.load(std::memory_order_acquire)) == seen &&
             !stop.load(std::memory_order_relaxed)) {
        KV_CPU_RELAX();
        if (++spins % 64 == 0 && std::chrono::steady_clock::now() > spin_end) break;
      }
      if (w == seen) {
        std::unique_lock<std::mutex> lock(mu);
        num_sleeping.fetch_add(1);
        work_cv.wait(lock, [&] { return work.load() != seen || stop.load(); });
        num_sleeping.fetch_sub(1);
        w = work.load(std::memory_order_acquire);
      }
    }
  }
};

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(std::max(1, num_threads)), state_(std::make_unique<State>()) {
  state_->workers.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) {
    state_->workers.emplace_back([s = state_.get()] { s->WorkerLoop(); });
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

void ThreadPool::ParallelFor(int64_t num_items, int64_t grain,
                             const std::function<void(int64_t begin, int64_t end)>& fn) {
  if (num_items <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t num_grains = (num_items + grain - 1) / grain;
  const int64_t num_chunks = std::min<int64_t>(
      {num_grains, static_cast<int64_t>(num_threads_) * kChunksPerThread, kMaxChunks});
  if (num_threads_ == 1 || num_chunks == 1) {
    fn(0, num_items);
    return;
  }
  // Chunk c covers grains [c * G / C, (c + 1) * G / C): sizes differ by at most one grain
  // (36 grains in 8 chunks: 4 or 5 grains each, not seven of 5 and one of 1, which left one
  // thread 20 grains and the other 16).
  const std::function<void(int64_t)> run_chunk = [&](int64_t chunk) {
    const int64_t begin = chunk * num_grains / num_chunks * grain;
    const int64_t end = (chunk + 1) * num_grains / num_chunks * grain;
    fn(begin, std::min(num_items, end));
  };

  State& s = *state_;
  const uint64_t prev = s.work.load(std::memory_order_relaxed);
  KV_CHECK(NextChunk(prev) == NumChunks(prev) && s.done.load() == NumChunks(prev))
      << "ParallelFor must not nest or overlap";
  s.task.store(&run_chunk, std::memory_order_relaxed);
  s.done.store(0, std::memory_order_relaxed);
  s.work.store(Pack(Generation(prev) + 1, num_chunks, 0));  // seq_cst: pairs with num_sleeping
  if (s.num_sleeping.load() > 0) {
    std::lock_guard<std::mutex> lock(s.mu);
    s.work_cv.notify_all();
  }
  s.RunChunks(s.work.load(std::memory_order_acquire));

  // Wait for chunks that workers started.
  if (s.done.load(std::memory_order_acquire) == num_chunks) return;
  auto spin_end = std::chrono::steady_clock::now() + kSpinTime;
  int spins = 0;
  while (s.done.load(std::memory_order_acquire) != num_chunks) {
    KV_CPU_RELAX();
    if (++spins % 64 == 0 && std::chrono::steady_clock::now() > spin_end) {
      std::unique_lock<std::mutex> lock(s.mu);
      s.caller_sleeping.store(true);  // seq_cst: pairs with done in RunChunks
      s.done_cv.wait(lock, [&] { return s.done.load() == num_chunks; });
      s.caller_sleeping.store(false);
      break;
    }
  }
}

void ThreadPool::RunOnAll(const std::function<void(int thread_index)>& fn) {
  ParallelFor(num_threads_, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) fn(static_cast<int>(i));
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

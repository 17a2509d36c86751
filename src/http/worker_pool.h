// WorkerPool: the threads HttpServer runs handlers on. Threads start as work arrives (up to
// max_threads) and stay; an idle server holds only the threads its busiest moment needed.
// Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvserve::http {

class WorkerPool {
 public:
  explicit WorkerPool(int max_threads);
  ~WorkerPool();  // Stop()
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task`; starts a thread when every running one is busy and the cap allows.
  void Submit(std::function<void()> task);
  // Runs what is queued, then joins every thread. Later Submit calls run nothing.
  void Stop();
  int num_threads() const;

 private:
  void Loop();

  const int max_threads_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> threads_;
  int num_idle_ = 0;
  bool stopping_ = false;
};

}  // namespace kvserve::http

#include "http/worker_pool.h"

#include <algorithm>
#include <utility>

namespace kvserve::http {

WorkerPool::WorkerPool(int max_threads) : max_threads_(std::max(1, max_threads)) {}

WorkerPool::~WorkerPool() { Stop(); }

void WorkerPool::Submit(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return;
  queue_.push_back(std::move(task));
  if (static_cast<int>(queue_.size()) > num_idle_ &&
      static_cast<int>(threads_.size()) < max_threads_) {
    threads_.emplace_back([this] { Loop(); });
  }
  cv_.notify_one();
}

void WorkerPool::Stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (std::thread& t : threads) t.join();
}

int WorkerPool::num_threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(threads_.size());
}

void WorkerPool::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    ++num_idle_;
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    --num_idle_;
    if (queue_.empty()) return;  // stopping, nothing left
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    task();
    task = nullptr;  // destroy what it holds outside the lock
    lock.lock();
  }
}

}  // namespace kvserve::http

// Tests: a KvBlockStore in memory, standing in for Redis (or any tier): values by key, with an
// outage switch, a write delay (a slow store) and a gate that holds lookups until released (a
// store that does not answer in time, without timing assumptions).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/kv_block_store.h"

namespace kvserve::testing {

// Thread-safe.
class MemoryKvStore : public KvBlockStore {
 public:
  explicit MemoryKvStore(KvTier tier = KvTier::kRedis) : tier_(tier) {}
  ~MemoryKvStore() override { ReleaseLookups(); }
  KvTier tier() const override { return tier_; }
  Status Put(uint64_t key, std::string_view value) override {
    std::this_thread::sleep_for(put_delay);
    std::lock_guard<std::mutex> lock(mu_);
    if (down) return UnavailableError("down");
    values_[key] = std::string(value);
    ++*puts;
    return OkStatus();
  }
  StatusOr<std::vector<std::string>> GetPrefix(std::span<const uint64_t> keys) override {
    {
      std::unique_lock<std::mutex> gate(gate_mu_);
      ++lookups_started_;
      gate_cv_.wait(gate, [&] { return !lookups_held_; });
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (down) return UnavailableError("down");
    std::vector<std::string> out;
    for (uint64_t k : keys) {
      auto it = values_.find(k);
      if (it == values_.end()) break;
      out.push_back(it->second);
    }
    return out;
  }
  bool MayContain(uint64_t) const override { return true; }
  void Erase(uint64_t key) override {
    std::lock_guard<std::mutex> lock(mu_);
    values_.erase(key);
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return values_.size();
  }
  // Lookups wait (without holding up Put) until ReleaseLookups().
  void HoldLookups() {
    std::lock_guard<std::mutex> gate(gate_mu_);
    lookups_held_ = true;
  }
  void ReleaseLookups() {
    {
      std::lock_guard<std::mutex> gate(gate_mu_);
      lookups_held_ = false;
    }
    gate_cv_.notify_all();
  }
  int64_t lookups_started() const {
    std::lock_guard<std::mutex> gate(gate_mu_);
    return lookups_started_;
  }

  std::atomic<bool> down{false};           // every call fails (Unavailable) while set
  std::chrono::milliseconds put_delay{0};  // set before use
  // Successful Puts; shared, so a test can read it after the store's owner destroyed it.
  std::shared_ptr<std::atomic<int64_t>> puts = std::make_shared<std::atomic<int64_t>>(0);

 private:
  const KvTier tier_;
  mutable std::mutex mu_;       // the values
  mutable std::mutex gate_mu_;  // the lookup gate
  std::condition_variable gate_cv_;
  bool lookups_held_ = false;
  int64_t lookups_started_ = 0;
  std::map<uint64_t, std::string> values_;
};

}  // namespace kvserve::testing

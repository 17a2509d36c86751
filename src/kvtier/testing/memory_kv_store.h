// Tests: a KvBlockStore in memory, standing in for Redis (or any tier): values by key, with an
// outage switch and an artificial lookup delay (a slow store).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/kv_block_store.h"

namespace kvserve::testing {

// Thread-safe.
class MemoryKvStore : public KvBlockStore {
 public:
  explicit MemoryKvStore(KvTier tier = KvTier::kRedis,
                         std::chrono::milliseconds lookup_delay = std::chrono::milliseconds(0))
      : tier_(tier), lookup_delay_(lookup_delay) {}
  KvTier tier() const override { return tier_; }
  Status Put(uint64_t key, std::string_view value) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (down) return UnavailableError("down");
    values_[key] = std::string(value);
    return OkStatus();
  }
  StatusOr<std::vector<std::string>> GetPrefix(std::span<const uint64_t> keys) override {
    std::this_thread::sleep_for(lookup_delay_);
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
  std::atomic<bool> down{false};  // every call fails (Unavailable) while set

 private:
  const KvTier tier_;
  const std::chrono::milliseconds lookup_delay_;
  mutable std::mutex mu_;
  std::map<uint64_t, std::string> values_;
};

}  // namespace kvserve::testing

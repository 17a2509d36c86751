#include "kvtier/kv_tier_manager.h"

#include <utility>

#include "base/check.h"
#include "base/logging.h"
#include "base/str_format.h"
#include "kvtier/disk_kv_store.h"
#include "kvtier/kv_block_record.h"
#include "kvtier/redis_kv_store.h"

namespace kvserve {

namespace {
using Clock = std::chrono::steady_clock;
double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

StatusOr<std::unique_ptr<KvTierManager>> KvTierManager::Create(KvTierManagerOptions options) {
  if (options.disk == nullptr && options.redis == nullptr) {
    return InvalidArgumentError("KV tiers: neither a disk folder nor Redis");
  }
  if (options.block_size <= 0 || options.block_bytes <= 0) {
    return InvalidArgumentError("KV tiers: invalid block geometry");
  }
  std::unique_ptr<KvTierManager> m(new KvTierManager(std::move(options)));
  return m;
}

KvTierManager::KvTierManager(KvTierManagerOptions options) : options_(std::move(options)) {
  for (KvBlockStore* s : {options_.disk.get(), options_.redis.get()}) {
    if (s == nullptr) continue;
    stats_.tiers[static_cast<int>(s->tier())].enabled = true;
    auto w = std::make_unique<Writer>();
    w->store = s;
    writers_.push_back(std::move(w));
  }
  for (auto& w : writers_) w->thread = std::thread([this, p = w.get()] { write_loop(p); });
  loader_ = std::thread([this] { load_loop(); });
}

KvTierManager::~KvTierManager() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& w : writers_) w->thread.join();
  loader_.join();
}

KvBlockStore* KvTierManager::store(KvTier tier) const {
  return tier == KvTier::kDisk ? options_.disk.get()
         : tier == KvTier::kRedis ? options_.redis.get()
                                  : nullptr;
}

bool KvTierManager::has_tier(KvTier tier) const { return store(tier) != nullptr; }

bool KvTierManager::wants(uint64_t key) const {
  if (options_.disk != nullptr && !options_.disk->MayContain(key)) return true;
  if (options_.redis == nullptr) return false;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = published_.find(key);
  return it == published_.end() ||
         Clock::now() - it->second >= options_.redis_republish_after;
}

void KvTierManager::Offer(KvTierBlock block, std::string payload) {
  KV_CHECK_EQ(static_cast<int64_t>(payload.size()), options_.block_bytes);
  const bool to_disk = options_.disk != nullptr && !options_.disk->MayContain(block.key);
  auto record = std::make_shared<const std::string>(EncodeKvBlockRecord(
      options_.fingerprint, block.key, block.parent_key, block.tokens, payload));
  const auto bytes = static_cast<int64_t>(record->size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    bool to_redis = false;
    if (options_.redis != nullptr) {
      auto it = published_.find(block.key);
      const Clock::time_point now = Clock::now();
      to_redis = it == published_.end() || now - it->second >= options_.redis_republish_after;
      if (to_redis) {
        if (published_.size() >= (size_t{1} << 20)) published_.clear();  // bound the memory
        published_[block.key] = now;
      }
    }
    for (auto& w : writers_) {
      const bool wanted = w->store->tier() == KvTier::kDisk ? to_disk : to_redis;
      if (!wanted) continue;
      KvTierCounters& c = stats_.tiers[static_cast<int>(w->store->tier())];
      if (w->queued_bytes + bytes > options_.max_queued_write_bytes) {
        ++c.writes_dropped;
        continue;
      }
      w->queue.push_back({block, record});
      w->queued_bytes += bytes;
    }
  }
  cv_.notify_all();
}

void KvTierManager::write_loop(Writer* w) {
  KvTierCounters* c = &stats_.tiers[static_cast<int>(w->store->tier())];
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !w->queue.empty(); });
    if (w->queue.empty()) return;  // stopping, and everything queued is written
    Write item = std::move(w->queue.front());
    w->queue.pop_front();
    const auto bytes = static_cast<int64_t>(item.record->size());
    lock.unlock();
    const Status s = w->store->Put(item.block.key, *item.record);
    lock.lock();
    w->queued_bytes -= bytes;
    if (s.ok()) {
      ++c->blocks_written;
      c->bytes_written += bytes;
      c->available = true;
    } else {
      ++c->write_errors;
      c->available = w->store->tier() != KvTier::kRedis;
      if (w->store->tier() == KvTier::kRedis) published_.erase(item.block.key);
      if (c->write_errors == 1 || c->write_errors % 1000 == 0) {
        KV_LOG(WARNING) << KvTierName(w->store->tier()) << " tier: " << s.message() << " ("
                        << c->write_errors << " failed writes so far; serving goes on)";
      }
    }
  }
}

bool KvTierManager::may_have(uint64_t key) const {
  return (options_.disk != nullptr && options_.disk->MayContain(key)) ||
         options_.redis != nullptr;
}

void KvTierManager::StartLoad(KvTierLoadRequest load) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    loads_.emplace_back(std::move(load), Clock::now());
    ++loads_in_flight_;
    ++stats_.loads;
  }
  cv_.notify_all();
}

std::vector<KvTierLoadResult> KvTierManager::TakeLoaded() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<KvTierLoadResult> out;
  out.swap(loaded_);
  loads_in_flight_ -= static_cast<int64_t>(out.size());
  return out;
}

int64_t KvTierManager::num_loads_in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return loads_in_flight_;
}

void KvTierManager::load_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !loads_.empty(); });
    if (stopping_) return;  // loads not done are abandoned: nobody will take them
    auto [request, started] = std::move(loads_.front());
    loads_.pop_front();
    lock.unlock();
    KvTierLoadResult result = load(request);
    result.seconds = SecondsBetween(started, Clock::now());
    lock.lock();
    stats_.loads_with_hits += result.num_blocks() > 0;
    stats_.load_seconds_total += result.seconds;
    loaded_.push_back(std::move(result));
  }
}

KvTierLoadResult KvTierManager::load(const KvTierLoadRequest& request) {
  KvTierLoadResult result;
  result.id = request.id;
  result.first_block = request.first_block;
  size_t next = 0;
  // Disk first (local), then Redis for what disk lacks, alternating while either finds more.
  while (next < request.blocks.size()) {
    size_t found = 0;
    for (KvTier tier : {KvTier::kDisk, KvTier::kRedis}) {
      KvBlockStore* s = store(tier);
      if (s == nullptr) continue;
      if (tier == KvTier::kDisk && !s->MayContain(request.blocks[next].key)) continue;
      std::vector<std::string> payloads =
          read_verified(s, request.blocks.data() + next, request.blocks.size() - next);
      found = payloads.size();
      for (std::string& p : payloads) {
        result.tiers.push_back(tier);
        result.payloads.push_back(std::move(p));
      }
      if (found > 0) break;
    }
    if (found == 0) break;
    next += found;
  }
  return result;
}

std::vector<std::string> KvTierManager::read_verified(KvBlockStore* s, const KvTierBlock* blocks,
                                                      size_t count) {
  const Clock::time_point start = Clock::now();
  std::vector<uint64_t> keys(count);
  for (size_t i = 0; i < count; ++i) keys[i] = blocks[i].key;
  StatusOr<std::vector<std::string>> values = s->GetPrefix(keys);
  std::vector<std::string> payloads;
  int64_t corrupt = 0, bytes = 0;
  if (values.ok()) {
    for (size_t i = 0; i < values->size(); ++i) {
      StatusOr<KvBlockRecord> r = DecodeKvBlockRecord((*values)[i], options_.fingerprint,
                                                      keys[i], options_.block_bytes);
      const bool ok = r.ok() && r->tokens == blocks[i].tokens &&
                      r->parent_key == blocks[i].parent_key;
      if (!ok) {
        // Corrupted, truncated, or (with astronomically small odds) another prefix's block
        // under the same key: never used, and dropped so it is not read again.
        KV_LOG(WARNING) << KvTierName(s->tier()) << " tier: block "
                        << StrFormat("%016llx", static_cast<unsigned long long>(keys[i]))
                        << " dropped: "
                        << (r.ok() ? std::string("tokens differ") : r.status().message());
        s->Erase(keys[i]);
        ++corrupt;
        break;
      }
      bytes += static_cast<int64_t>((*values)[i].size());
      payloads.push_back(std::move(r->payload));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  KvTierCounters& c = stats_.tiers[static_cast<int>(s->tier())];
  ++c.lookups;
  c.read_seconds += SecondsBetween(start, Clock::now());
  if (!values.ok()) {
    ++c.read_errors;
    c.available = false;
  } else if (s->tier() == KvTier::kRedis) {
    c.available = true;
  }
  c.corrupt_blocks += corrupt;
  c.blocks_read += static_cast<int64_t>(payloads.size());
  c.bytes_read += bytes;
  return payloads;
}

KvTierStats KvTierManager::stats() const {
  KvTierStats out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out = stats_;
    for (const auto& w : writers_) {
      out.tiers[static_cast<int>(w->store->tier())].queued_write_bytes = w->queued_bytes;
    }
  }
  if (const auto* d = dynamic_cast<const DiskKvStore*>(options_.disk.get())) {
    out.tiers[static_cast<int>(KvTier::kDisk)].stored_blocks = d->num_files();
    out.tiers[static_cast<int>(KvTier::kDisk)].stored_bytes = d->num_bytes();
  }
  return out;
}

std::string KvTierManager::description() const {
  std::string out;
  if (const auto* d = dynamic_cast<const DiskKvStore*>(options_.disk.get())) {
    out += "disk " + d->folder() + " (" + std::to_string(d->num_files()) + " blocks, " +
           HumanBytes(d->num_bytes()) + " of " + HumanBytes(d->max_bytes()) + ")";
  }
  if (const auto* r = dynamic_cast<const RedisKvStore*>(options_.redis.get())) {
    if (!out.empty()) out += "; ";
    out += r->description() + (r->connected() ? "" : " (not reachable now: retried in the background)");
  }
  return out + StrFormat("; fingerprint %016llx, %s per block, write-through",
                         static_cast<unsigned long long>(options_.fingerprint),
                         HumanBytes(options_.block_bytes).c_str());
}

}  // namespace kvserve

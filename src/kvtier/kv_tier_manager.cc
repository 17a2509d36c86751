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

void KvTierLatency::observe(double seconds, int64_t times) {
  int b = 0;
  while (b < kNumBuckets - 1 && seconds > kBounds[b]) ++b;
  counts[b] += times;
  sum += seconds * static_cast<double>(times);
  count += times;
}

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
  if (options_.on_disk_events) {
    if (auto* d = dynamic_cast<DiskKvStore*>(options_.disk.get())) {
      d->set_removal_listener([this](uint64_t key) {
        KvCacheEvent e;
        e.kind = KvCacheEvent::Kind::kBlockRemoved;
        e.block_hashes = {key};
        e.medium = "DISK";
        note_disk_event(std::move(e));
      });
    }
  }
  for (auto& w : writers_) w->thread = std::thread([this, p = w.get()] { write_loop(p); });
  loader_ = std::thread([this] { load_loop(); });
}

KvTierManager::~KvTierManager() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    drain_deadline_ = Clock::now() + options_.shutdown_drain;
  }
  cv_.notify_all();
  for (auto& w : writers_) w->thread.join();
  loader_.join();
  flush_disk_events();
}

void KvTierManager::note_disk_event(KvCacheEvent event) {
  std::lock_guard<std::mutex> lock(events_mu_);
  disk_events_.push_back(std::move(event));
}

void KvTierManager::flush_disk_events() {
  if (!options_.on_disk_events) return;
  std::lock_guard<std::mutex> lock(events_mu_);
  if (disk_events_.empty()) return;
  std::vector<KvCacheEvent> batch;
  batch.swap(disk_events_);
  options_.on_disk_events(std::move(batch));
}

KvBlockStore* KvTierManager::store(KvTier tier) const {
  return tier == KvTier::kDisk ? options_.disk.get()
         : tier == KvTier::kRedis ? options_.redis.get()
                                  : nullptr;
}

bool KvTierManager::has_tier(KvTier tier) const { return store(tier) != nullptr; }

bool KvTierManager::redis_wants(uint64_t key) const {
  if (options_.redis == nullptr) return false;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = published_.find(key);
  return it == published_.end() ||
         Clock::now() - it->second >= options_.redis_republish_after;
}

bool KvTierManager::wants(uint64_t key) const {
  return (options_.disk != nullptr && !options_.disk->MayContain(key)) || redis_wants(key);
}

std::string KvTierManager::take_buffer() {
  std::lock_guard<std::mutex> lock(pool_mu_);
  if (pool_.empty()) return std::string();
  std::string b = std::move(pool_.back());
  pool_.pop_back();
  pooled_bytes_ -= static_cast<int64_t>(b.capacity());
  return b;
}

void KvTierManager::give_back(std::string buffer) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  const auto bytes = static_cast<int64_t>(buffer.capacity());
  if (pooled_bytes_ + bytes > options_.max_pooled_bytes) return;  // freed
  pooled_bytes_ += bytes;
  pool_.push_back(std::move(buffer));
}

void KvTierManager::Recycle(std::vector<std::string> buffers) {
  for (std::string& b : buffers) give_back(std::move(b));
}

void KvTierManager::Offer(const KvTierBlock& block,
                          const std::function<void(uint8_t* payload)>& fill) {
  const bool to_disk = options_.disk != nullptr && !options_.disk->MayContain(block.key);
  const bool to_redis = redis_wants(block.key);
  if (!to_disk && !to_redis) return;
  {
    // Room first: a block no queue can take is not worth copying out.
    const auto expected = static_cast<int64_t>(
        KvBlockRecordBytes(block.tokens.size(), static_cast<size_t>(options_.block_bytes)));
    std::lock_guard<std::mutex> lock(mu_);
    bool room = false;
    for (auto& w : writers_) {
      const bool wanted = w->store->tier() == KvTier::kDisk ? to_disk : to_redis;
      if (!wanted) continue;
      room = room || w->queued_bytes + expected <= options_.max_queued_write_bytes;
    }
    if (!room) {  // counted as dropped for each tier that wanted it
      for (auto& w : writers_) {
        if (w->store->tier() == KvTier::kDisk ? to_disk : to_redis) {
          ++stats_.tiers[static_cast<int>(w->store->tier())].writes_dropped;
        }
      }
      return;
    }
  }
  // Encoded once into a pooled buffer, shared by the writers, back to the pool after the last.
  std::string* buffer = new std::string(take_buffer());
  EncodeKvBlockRecordInto(options_.fingerprint, block.key, block.parent_key, block.tokens,
                          static_cast<size_t>(options_.block_bytes), fill, buffer);
  std::shared_ptr<std::string> record(buffer, [this](std::string* b) {
    give_back(std::move(*b));
    delete b;
  });
  const auto bytes = static_cast<int64_t>(record->size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (to_redis) {
      if (published_.size() >= (size_t{1} << 16)) published_.clear();  // bound the memory (a few MB)
      published_[block.key] = Clock::now();
    }
    for (auto& w : writers_) {
      const bool wanted = w->store->tier() == KvTier::kDisk ? to_disk : to_redis;
      if (!wanted) continue;
      KvTierCounters& c = stats_.tiers[static_cast<int>(w->store->tier())];
      if (w->queued_bytes + bytes > options_.max_queued_write_bytes) {
        ++c.writes_dropped;
        if (w->store->tier() == KvTier::kRedis) published_.erase(block.key);
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
  const bool disk_events = w->store->tier() == KvTier::kDisk && options_.on_disk_events;
  int64_t unflushed = 0;  // stored events noted since the last batch
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (w->queue.empty() && unflushed > 0) {
      unflushed = 0;
      lock.unlock();
      flush_disk_events();
      lock.lock();
      continue;
    }
    cv_.wait(lock, [&] { return stopping_ || !w->queue.empty(); });
    if (w->queue.empty()) return;  // stopping, and everything queued is written
    if (stopping_ && Clock::now() >= drain_deadline_) {
      // Shutting down and out of time (a slow Redis, a stalled disk): drop the rest.
      c->writes_dropped += static_cast<int64_t>(w->queue.size());
      w->queue.clear();
      w->queued_bytes = 0;
      return;
    }
    Write item = std::move(w->queue.front());
    w->queue.pop_front();
    const auto bytes = static_cast<int64_t>(item.record->size());
    lock.unlock();
    const Clock::time_point start = Clock::now();
    const Status s = w->store->Put(item.block.key, *item.record);
    const double seconds = SecondsBetween(start, Clock::now());
    item.record.reset();  // the last writer returns the buffer to the pool
    if (s.ok() && disk_events) {
      KvCacheEvent e;
      e.kind = KvCacheEvent::Kind::kBlockStored;
      e.block_hashes = {item.block.key};
      if (item.block.parent_key != 0) e.parent_block_hash = item.block.parent_key;
      e.token_ids = std::move(item.block.tokens);
      e.medium = "DISK";
      note_disk_event(std::move(e));  // after the removals this Put's budget caused
      if (++unflushed >= 64) {
        unflushed = 0;
        flush_disk_events();
      }
    }
    lock.lock();
    w->queued_bytes -= bytes;
    c->block_write_seconds.observe(seconds);
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
  for (const KvTierLoadResult& r : out) loads_in_flight_ -= r.last;
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
    load(request, started);
    flush_disk_events();  // removals of corrupted blocks
    lock.lock();
  }
}

void KvTierManager::load(const KvTierLoadRequest& request, Clock::time_point started) {
  KvTierLoadResult chunk;
  chunk.id = request.id;
  chunk.load_first_block = request.first_block;
  chunk.first_block = request.first_block;
  int64_t found_total = 0;
  auto emit = [&](bool last) {
    KvTierLoadResult next;
    next.id = chunk.id;
    next.load_first_block = chunk.load_first_block;
    next.first_block = chunk.first_block + chunk.num_blocks();
    found_total += chunk.num_blocks();
    chunk.last = last;
    std::lock_guard<std::mutex> lock(mu_);
    if (last) {
      chunk.seconds = SecondsBetween(started, Clock::now());
      stats_.loads_with_hits += found_total > 0;
      stats_.load_seconds_total += chunk.seconds;
    }
    loaded_.push_back(std::move(chunk));
    chunk = std::move(next);
  };
  size_t next = 0;
  // Disk first (local), then Redis for what disk lacks, alternating while either finds more;
  // nothing more once nobody waits.
  bool expired = false;
  while (next < request.blocks.size()) {
    if (Clock::now() >= request.deadline) {
      expired = true;
      break;
    }
    size_t found = 0;
    for (KvTier tier : {KvTier::kDisk, KvTier::kRedis}) {
      KvBlockStore* s = store(tier);
      if (s == nullptr) continue;
      if (tier == KvTier::kDisk && !s->MayContain(request.blocks[next].key)) continue;
      found = read_verified(s, request.blocks.data() + next, request.blocks.size() - next,
                            &chunk, [&] { emit(false); });
      if (found > 0) break;
    }
    if (found == 0) break;
    next += found;
  }
  if (expired) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.loads_expired;
  }
  emit(true);
}

size_t KvTierManager::read_verified(KvBlockStore* s, const KvTierBlock* blocks, size_t count,
                                    KvTierLoadResult* chunk, const std::function<void()>& emit) {
  const Clock::time_point start = Clock::now();
  std::vector<uint64_t> keys(count);
  for (size_t i = 0; i < count; ++i) keys[i] = blocks[i].key;
  int64_t corrupt = 0, bytes = 0;
  size_t verified = 0;
  std::vector<uint64_t> from_redis;  // in Redis already: not to be published again
  StatusOr<size_t> visited = s->ForEachInPrefix(keys, [&](size_t i, std::string_view value) {
    StatusOr<KvBlockRecord> r =
        DecodeKvBlockRecord(value, options_.fingerprint, keys[i], options_.block_bytes);
    const bool ok =
        r.ok() && r->tokens == blocks[i].tokens && r->parent_key == blocks[i].parent_key;
    if (!ok) {
      // Corrupted, truncated, or (with astronomically small odds) another prefix's block
      // under the same key: never used, and dropped so it is not read again.
      KV_LOG(WARNING) << KvTierName(s->tier()) << " tier: block "
                      << StrFormat("%016llx", static_cast<unsigned long long>(keys[i]))
                      << " dropped: " << (r.ok() ? std::string("tokens differ") : r.status().message());
      s->Erase(keys[i]);
      ++corrupt;
      return false;
    }
    if (s->tier() == KvTier::kRedis) from_redis.push_back(keys[i]);
    std::string payload = take_buffer();
    payload.assign(r->payload);
    chunk->payloads.push_back(std::move(payload));
    chunk->tiers.push_back(s->tier());
    bytes += static_cast<int64_t>(value.size());
    ++verified;
    if (chunk->num_blocks() >= options_.load_chunk_blocks) emit();
    return true;
  });
  std::lock_guard<std::mutex> lock(mu_);
  KvTierCounters& c = stats_.tiers[static_cast<int>(s->tier())];
  ++c.lookups;
  const double seconds = SecondsBetween(start, Clock::now());
  c.read_seconds += seconds;
  if (verified > 0) {
    c.block_read_seconds.observe(seconds / static_cast<double>(verified),
                                 static_cast<int64_t>(verified));
  }
  if (!visited.ok()) {
    ++c.read_errors;
    c.available = false;
  } else if (s->tier() == KvTier::kRedis) {
    c.available = true;
  }
  c.corrupt_blocks += corrupt;
  for (uint64_t key : from_redis) published_[key] = Clock::now();
  c.blocks_read += static_cast<int64_t>(verified);
  c.bytes_read += bytes;
  return verified;
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

// KvBlockStore: where KV blocks go when they leave a process's memory. One interface for the
// disk tier (DiskKvStore) and the shared Redis tier (RedisKvStore); KvTierManager drives them
// from its background threads.
//
// A store keeps opaque values (encoded KvBlockRecords, kv_block_record.h) under 64-bit keys:
// PrefixBlockKey(NamespaceKey(namespace), chain), the same block identity as the memory
// tier's and the KV events'. A store is opened for one model fingerprint (weights, tokenizer,
// KV dtype, block size, scales): values written under another fingerprint are never seen.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvserve {

// Which tier served or stored a block. kMemory is the process's own paged cache.
enum class KvTier { kMemory = 0, kDisk = 1, kRedis = 2 };
inline constexpr int kNumKvTiers = 3;
const char* KvTierName(KvTier tier);  // "memory", "disk", "redis"

// Thread-safe: any thread may call any method. Methods may block on I/O (call them from a
// background thread, never the engine's).
class KvBlockStore {
 public:
  virtual ~KvBlockStore() = default;
  virtual KvTier tier() const = 0;

  // Stores `value` under `key`, replacing what was there. An error (disk full, Redis down or
  // slow) means the value was not stored; the caller drops the block.
  virtual Status Put(uint64_t key, std::string_view value) = 0;

  // The values of keys[0], keys[1], ... up to the first key that is absent (or unreadable):
  // the found prefix, possibly empty. An error only when the store cannot be asked at all
  // (Redis down): the caller treats it as "nothing found".
  virtual StatusOr<std::vector<std::string>> GetPrefix(std::span<const uint64_t> keys) = 0;

  // The same without copies: calls visit(i, value of keys[i]) for i = 0, 1, ... until a key is
  // absent or visit returns false; `value` is valid during the call only. Returns how many
  // values were visited. The default reads through GetPrefix; a store with its own buffers
  // (the disk tier) reads each value into memory it reuses, so a long prefix does not touch
  // fresh pages for every block.
  virtual StatusOr<size_t> ForEachInPrefix(
      std::span<const uint64_t> keys,
      const std::function<bool(size_t index, std::string_view value)>& visit) {
    StatusOr<std::vector<std::string>> values = GetPrefix(keys);
    if (!values.ok()) return values.status();
    size_t i = 0;
    while (i < values->size() && visit(i, (*values)[i])) ++i;
    return i;
  }

  // Whether `key` may be present, without I/O (the disk tier's index; Redis cannot tell and
  // answers true). Used to skip lookups that cannot hit.
  virtual bool MayContain(uint64_t key) const = 0;

  // Forgets `key` (a value that failed its checksum). Best effort.
  virtual void Erase(uint64_t key) = 0;
};

}  // namespace kvserve

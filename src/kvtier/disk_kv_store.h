// DiskKvStore: the disk tier (--kv-offload-dir, --kv-offload-bytes). One file per block
// under DIR/kvserve-<fingerprint>/<2 hex>/<key>.kvb, written to a temporary name and renamed,
// so a reader sees a whole file or none; a crash leaves at worst a temporary file, removed at
// the next start. Blocks of another fingerprint live in another folder and are never read.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvtier/kv_block_store.h"

namespace kvserve {

struct DiskKvStoreOptions {
  std::string dir;          // created if absent
  uint64_t fingerprint = 0;
  int64_t max_bytes = 0;    // the files of this fingerprint stay within it (> 0)
};

// One process per folder: Open takes an exclusive lock (flock) on DIR/kvserve-<fingerprint>/
// .lock and fails while another process holds it (its index and budget are its own; replicas
// share blocks through Redis, not through one folder).
//
// Owns the index of the files of its fingerprint folder (key -> size, least recently used
// first) and keeps their total within max_bytes by deleting the least recently used. Files of
// the folder found at Open() are indexed (oldest modification first in the LRU order).
// Thread-safe: one mutex guards the index; file I/O runs outside it, so a long read does not
// block Put's bookkeeping, and a file being replaced is read whole or not at all (rename).
class DiskKvStore : public KvBlockStore {
 public:
  // Fails when the folder cannot be created or listed.
  static StatusOr<std::unique_ptr<DiskKvStore>> Open(const DiskKvStoreOptions& options);
  ~DiskKvStore() override;

  // Called with each key whose file the store deletes from now on (the LRU budget, Erase), on
  // the deleting thread, outside the store's lock (KV events: BlockRemoved on "DISK"). Set it
  // before the store is shared between threads.
  void set_removal_listener(std::function<void(uint64_t key)> listener) {
    on_removed_ = std::move(listener);
  }

  KvTier tier() const override { return KvTier::kDisk; }
  // Fails (and stores nothing) when the value exceeds max_bytes or the write fails (disk
  // full, file size limit, permissions); a partial file is removed.
  Status Put(uint64_t key, std::string_view value) override;
  StatusOr<std::vector<std::string>> GetPrefix(std::span<const uint64_t> keys) override;
  // Reads each file into one buffer per thread, reused from call to call.
  StatusOr<size_t> ForEachInPrefix(
      std::span<const uint64_t> keys,
      const std::function<bool(size_t index, std::string_view value)>& visit) override;
  bool MayContain(uint64_t key) const override;
  void Erase(uint64_t key) override;

  const std::string& folder() const { return folder_; }  // DIR/kvserve-<fingerprint>
  int64_t num_files() const;
  int64_t num_bytes() const;
  int64_t max_bytes() const { return max_bytes_; }
  // Found at Open(): files indexed, and temporary files removed.
  int64_t num_recovered_files() const { return num_recovered_files_; }
  int64_t num_removed_temporaries() const { return num_removed_temporaries_; }

 private:
  struct Entry {
    int64_t bytes = 0;
    std::list<uint64_t>::iterator lru;  // position in lru_
  };
  DiskKvStore(std::string folder, int64_t max_bytes)
      : folder_(std::move(folder)), max_bytes_(max_bytes) {}
  // Deletes the files of keys the index already forgot, and reports them.
  void remove_files(const std::vector<uint64_t>& keys) const;
  std::string path_of(uint64_t key) const;
  // Under mu_: drops `key` from the index; returns its path for deletion outside the lock.
  void forget_locked(uint64_t key);

  const std::string folder_;
  const int64_t max_bytes_;
  std::function<void(uint64_t)> on_removed_;
  int lock_fd_ = -1;  // holds the folder's flock
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Entry> index_;
  std::list<uint64_t> lru_;  // front = least recently used
  int64_t total_bytes_ = 0;
  int64_t num_recovered_files_ = 0;
  int64_t num_removed_temporaries_ = 0;
};

}  // namespace kvserve

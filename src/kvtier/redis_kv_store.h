// RedisKvStore: the shared KV tier (--kv-redis). Block records go to one Redis that several
// kvserve replicas share, so a prefix computed by one replica can be loaded by another.
//
// Each value lives under "kvserve:kv:<fingerprint, 16 hex>:<key, 16 hex>" with a TTL, so that
// Redis (configured with an LRU/TTL eviction policy) bounds the tier's size and values of a
// retired model fingerprint age out on their own.
//
// Redis is an optimisation, never a dependency: a Redis that is down, slow or refusing makes
// calls fail within the configured timeouts (the caller then drops the block or treats the
// lookup as a miss), and the store reconnects on its own once Redis is back.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "kvtier/kv_block_store.h"

// hiredis types, so that users of this header do not include hiredis.
struct redisContext;
struct redisReply;

namespace kvserve {

// Where Redis is, from a URL:
//   redis://[[default]:password@]host[:port][/db]   (host may be an IPv6 literal in [...];
//                                                    the password may be %-encoded)
//   unix:///path/to/socket
struct RedisAddress {
  std::string host;       // empty for a Unix socket
  int port = 6379;
  std::string unix_path;  // set for unix:// URLs
  std::string password;   // empty: no AUTH
  int db = 0;             // SELECTed after connecting when not 0
};

// InvalidArgument naming what is wrong (TLS, an ACL user other than "default", a bad port or
// db, trailing text) for anything but the forms above.
StatusOr<RedisAddress> ParseRedisUrl(std::string_view url);

struct RedisKvStoreOptions {
  std::string url;             // see RedisAddress
  uint64_t fingerprint = 0;    // the model fingerprint: part of every key
  int64_t ttl_seconds = 3600;  // SET ... EX ttl_seconds on every Put; 0: no TTL
  int64_t connect_timeout_ms = 200;
  // Per socket operation (redisSetTimeout): a Redis that stops answering is an error, never a
  // stall of the thread that asked.
  int64_t command_timeout_ms = 500;
  // After a failure, calls fail fast (Unavailable, no I/O) until this has passed; then the next
  // call makes one reconnection attempt. Keeps an outage from costing a timeout per block.
  int64_t retry_interval_ms = 1000;
};

// Thread-safe: one hiredis connection guarded by a mutex, so calls are serialized (they run on
// the tier manager's background threads, where that is fine). Invariant: context_ is either a
// healthy connection (authenticated, db selected) or null; any failure (connection refused,
// timeout, I/O error, an error or unexpected reply) frees it, counts an error and starts the
// retry interval, because after a timeout the connection's replies can no longer be trusted
// to match its requests.
class RedisKvStore : public KvBlockStore {
 public:
  // Parses the URL (InvalidArgument for a malformed one, or for timeouts <= 0) and tries to
  // connect once. A Redis that is down is not an error: the store starts disconnected and
  // retries later.
  static StatusOr<std::unique_ptr<RedisKvStore>> Create(const RedisKvStoreOptions& options);
  ~RedisKvStore() override;
  RedisKvStore(const RedisKvStore&) = delete;
  RedisKvStore& operator=(const RedisKvStore&) = delete;

  KvTier tier() const override { return KvTier::kRedis; }
  // SET key value [EX ttl]; binary-safe.
  Status Put(uint64_t key, std::string_view value) override;
  // One MGET of all keys; the values up to the first nil (or non-string).
  StatusOr<std::vector<std::string>> GetPrefix(std::span<const uint64_t> keys) override;
  // Chunks of kMgetKeys keys per MGET, visited as each arrives: a long prefix neither waits
  // for one huge reply nor holds all of it in memory at once.
  StatusOr<size_t> ForEachInPrefix(
      std::span<const uint64_t> keys,
      const std::function<bool(size_t index, std::string_view value)>& visit) override;
  static constexpr size_t kMgetKeys = 16;
  bool MayContain(uint64_t /*key*/) const override { return true; }
  // DEL, best effort (a failure only counts as an error).
  void Erase(uint64_t key) override;

  // Whether a connection is open now (it may still turn out to be dead on the next call).
  bool connected() const { return connected_.load(std::memory_order_relaxed); }
  // "redis 127.0.0.1:6379 db 0, TTL 3600 s"; never the password.
  std::string description() const { return description_; }
  // Failed connection attempts and failed commands (not the calls refused while waiting out
  // the retry interval).
  int64_t num_errors() const { return num_errors_.load(std::memory_order_relaxed); }
  // Successful connections after the first attempt (the one in Create).
  int64_t num_reconnects() const { return num_reconnects_.load(std::memory_order_relaxed); }

  // The Redis key of `key` under `fingerprint` (exposed for tests and tools).
  static std::string RedisKey(uint64_t fingerprint, uint64_t key);

 private:
  using Clock = std::chrono::steady_clock;
  using ReplyPtr = std::unique_ptr<redisReply, void (*)(void*)>;  // freeReplyObject

  RedisKvStore(const RedisKvStoreOptions& options, RedisAddress address);
  // Opens, authenticates and selects; on failure leaves context_ null.
  Status ConnectLocked();
  // OK with context_ set, or Unavailable (fail fast, or the one reconnection attempt failed).
  Status EnsureConnectedLocked();
  // Runs one command. Null reply (with the error in *error) on I/O failure, timeout or an
  // error reply; the caller then calls FailLocked.
  ReplyPtr CommandLocked(const std::vector<std::string_view>& args, std::string* error);
  // Frees the connection (if any).
  void DropLocked();
  // Drops the connection, counts the error, starts the retry interval; returns Unavailable.
  Status FailLocked(const std::string& what);

  const RedisKvStoreOptions options_;
  const RedisAddress address_;
  const std::string description_;

  std::mutex mu_;
  redisContext* context_ = nullptr;  // guarded by mu_
  Clock::time_point retry_after_;    // guarded by mu_: no connection attempt before this
  std::string last_error_;           // guarded by mu_: why the last attempt failed
  bool first_attempt_done_ = false;  // guarded by mu_
  bool outage_logged_ = false;       // guarded by mu_: one warning per outage, not per retry

  // Readable without mu_ (which a slow command may hold for a timeout).
  std::atomic<bool> connected_{false};
  std::atomic<int64_t> num_errors_{0};
  std::atomic<int64_t> num_reconnects_{0};
};

}  // namespace kvserve

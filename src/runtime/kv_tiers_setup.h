// The KV tiers as a server sets them up: the model fingerprint that keys them, and the
// KvTierManager built from the flags (`--kv-offload-dir`, `--kv-offload-bytes`,
// `--kv-redis`, `--kv-redis-ttl`).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "kv/kv_storage.h"
#include "kvtier/kv_tier_manager.h"
#include "model/llama.h"
#include "tokenizer/vocab_spec.h"

namespace kvserve {

struct KvTierFlags {
  std::string offload_dir;          // --kv-offload-dir (empty: no disk tier)
  int64_t offload_bytes = 0;        // --kv-offload-bytes (needed with a folder)
  std::string redis_url;            // --kv-redis (empty: no Redis tier)
  int64_t redis_ttl_seconds = 3600;        // --kv-redis-ttl
  int64_t redis_timeout_ms = 500;          // --kv-redis-timeout-ms, per command
  int64_t load_timeout_ms = 2000;          // --kv-tier-load-timeout-ms
  bool enabled() const { return !offload_dir.empty() || !redis_url.empty(); }
};

// What a block's stored KV depends on, hashed (XXH3-64): every weight tensor (name, dtype,
// shape, bytes), the model's geometry and RoPE settings, the vocabulary (tokens, types,
// merges, scores), the KV dtype, layout and block size, and the fixed fp8 scales and channel
// norms. Reads every weight byte once (about 10 GB/s; progress for large models).
uint64_t KvTierFingerprint(const LlamaModel& model, const VocabSpec* vocab,
                           const KvStorage& storage,
                           const std::function<void(int64_t, int64_t)>& progress = {});

// The stores and their manager for `flags` (flags.enabled()), keyed by `fingerprint`.
// InvalidArgument for inconsistent flags, a folder that cannot be created or a bad Redis URL;
// a Redis that is down is not an error (the tier degrades until it is back). `on_disk_events`
// (optional, --kv-events-config): the disk tier's BlockStored / BlockRemoved events, medium
// "DISK", from the tiers' threads; it must not block.
StatusOr<std::unique_ptr<KvTierManager>> CreateKvTiers(
    const KvTierFlags& flags, uint64_t fingerprint, const KvStorage& storage,
    std::function<void(std::vector<KvCacheEvent>)> on_disk_events = nullptr);

}  // namespace kvserve

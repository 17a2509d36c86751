// KV cache events: what entered and left the prefix cache, for routers that learn where
// blocks live (vLLM's KV events: BlockStored / BlockRemoved / AllBlocksCleared; the wire format
// is src/kvevents). Recorded by RadixCache when asked (RadixCache::set_event_log), taken by
// the engine once per step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/ids.h"

namespace kvserve {

struct KvCacheEvent {
  enum class Kind { kBlockStored, kBlockRemoved, kAllBlocksCleared };
  Kind kind = Kind::kBlockStored;
  // Block identities: PrefixBlockKey(NamespaceKey(namespace), chain) of each block, so equal
  // prefixes under one namespace (model, cache_salt) have equal hashes, and different
  // namespaces never share one. Stored: consecutive blocks of one prefix, parent first.
  std::vector<uint64_t> block_hashes;
  // Stored: the block before the first one (none for a prompt's first block).
  std::optional<uint64_t> parent_block_hash;
  std::vector<TokenId> token_ids;  // Stored: block_size tokens per block, concatenated
  // Where the blocks are: unset for the memory tier (vLLM's primary medium, sent as nil), or
  // "DISK" for the disk tier (--kv-offload-dir), as vLLM's offloading connector names its
  // "CPU" tier. The shared Redis tier sends none: its blocks belong to no replica.
  std::optional<std::string> medium;

  bool operator==(const KvCacheEvent&) const = default;
};

}  // namespace kvserve

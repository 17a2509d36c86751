// RadixCache: the prefix cache's index. A page-aligned radix tree (a trie over full KV blocks)
// per namespace, in the manner of SGLang's RadixCache with page_size = block size: each node
// holds one full block of block_size tokens and the BlockId whose KV they fill; the path from
// a namespace root to a node spells the prompt prefix that block ends.
//
// It knows nothing of BlockPool or of requests: KvCacheManager marks a node's block cached in
// the pool when it inserts it and frees the blocks that evict() returns.
#pragma once

#include <cstdint>
#include <deque>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/ids.h"
#include "kv/block_pool.h"
#include "kv/kv_events.h"

namespace kvserve {

// Why tokens of a prompt were not served from the prefix cache.
enum class PrefixMissReason {
  kNeverSeen,           // no request with this prefix ran (in this namespace or another)
  kEvicted,             // it was cached but its blocks were evicted for memory
  kOtherNamespace,      // cached, but under another namespace (model or cache_salt)
  kPartialBlock,        // the tail that does not fill a block (never cached)
  kLastTokenRecomputed  // cached, but recomputed for its logits (the last prompt token of a
                        // full hit; positions whose prompt logits a request wants)
};
const char* PrefixMissReasonName(PrefixMissReason reason);
inline constexpr int kNumPrefixMissReasons = 5;

// 64-bit hash of a block's token ids (fast, not cryptographic: the tree compares the tokens
// themselves, so a collision can only cost a cache hit, never return someone else's KV).
uint64_t HashBlockTokens(std::span<const TokenId> tokens);

// The one hash chain of a token prefix in whole blocks, as the tree keys and classifies it:
// chain_0 = kPrefixChainSeed and chain_{i+1} = ExtendPrefixChain(chain_i, tokens of block i).
// A chain is namespace-free (miss reasons compare chains across namespaces);
// PrefixBlockKey(NamespaceKey(ns), chain_i) identifies the namespace and the first i blocks
// (the scheduler keeps these per request to spot blocks another request is computing).
inline constexpr uint64_t kPrefixChainSeed = 0x589965cc75374cc3ull;
uint64_t ExtendPrefixChain(uint64_t chain, std::span<const TokenId> block_tokens);
uint64_t NamespaceKey(std::string_view ns);
uint64_t PrefixBlockKey(uint64_t namespace_key, uint64_t chain);

struct RadixCacheOptions {
  int64_t block_size = 16;  // tokens per node
  // Evicted prefixes remembered (FIFO) to tell an "evicted" miss from a "never seen" one.
  // Older evictions read as never seen. 0: remember none.
  int64_t eviction_history_size = 1 << 16;
  // Nodes to reserve room for up front (address space only: pages are touched as nodes
  // come); KvCacheManager passes its number of blocks. 0: grow as needed.
  int64_t reserve_blocks = 0;
};

// Owns the tree nodes (in a slab addressed by NodeId), the namespace roots, the set of
// evictable leaves and the eviction history. Does not own blocks: it stores their ids.
// Engine thread only (no locks).
//
// Locks: lock(node) counts one user of the node (KvCacheManager: one live sequence whose
// table covers it). Users lock whole paths from the root, so a node's lock count is at least
// the sum of its children's; lock() and unlock() KV_CHECK that. A locked node (and hence
// every ancestor of it) is never evicted.
//
// Eviction: evict() removes unlocked leaves, least recently used first, where a node is used
// when it is inserted, locked or unlocked (so a path released by a finished sequence is as
// recent as its release, leaf first). A parent whose last child goes becomes a leaf and a
// candidate in turn, with its own last-use time; the order is fully deterministic.
//
// Invariants (check_invariants): parent/child links agree; every node's key is the hash of
// its block_size tokens; block ids are unique; lock(parent) >= sum of lock(children);
// evictable leaves == unlocked non-root nodes without children; num_evictable() == unlocked
// nodes; an empty namespace root is removed.
class RadixCache {
 public:
  using NodeId = int32_t;
  static constexpr NodeId kNoNode = -1;

  // The cached path of a prompt, and why the blocks after it are missing.
  struct Match {
    std::vector<NodeId> nodes;  // root-to-leaf, one per matched block
    // One per full block after the matched path (up to the requested number of blocks):
    // kEvicted, kOtherNamespace or kNeverSeen.
    std::vector<PrefixMissReason> misses;
  };

  struct InsertResult {
    NodeId node = kNoNode;  // the node for the block (new or existing); kNoNode on a collision
    bool inserted = false;  // true: a new node holding the given block
  };

  explicit RadixCache(const RadixCacheOptions& options);
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  int64_t block_size() const { return block_size_; }

  // Longest cached path of the first `num_blocks` full blocks of `tokens` under namespace
  // `ns` (tokens.size() >= num_blocks * block_size). Changes nothing (no use-time update).
  Match match(std::string_view ns, std::span<const TokenId> tokens, int64_t num_blocks) const;

  // Adds the block `block_tokens` (block_size tokens) as a child of `parent` (kNoNode: the
  // root of namespace `ns`, created if needed) holding `block`, or returns the existing child
  // with those tokens (inserted = false; its block may differ from `block`). Returns node ==
  // kNoNode if a child with another token list has the same hash (not inserted). The new node
  // is unlocked: lock it to keep it. `parent` must belong to namespace `ns`.
  InsertResult insert(std::string_view ns, NodeId parent, std::span<const TokenId> block_tokens,
                      BlockId block);

  // One user more / fewer of `node`. Lock a path root first, unlock it leaf first.
  void lock(NodeId node);
  void unlock(NodeId node);

  // Removes up to `num_blocks` unlocked leaves, least recently used first (parents that become
  // leaves included), records them in the eviction history, and returns their blocks in
  // eviction order.
  std::vector<BlockId> evict(int64_t num_blocks);

  BlockId block(NodeId node) const { return get(node).block; }
  NodeId parent(NodeId node) const;  // kNoNode for a first block (child of a namespace root)
  int32_t lock_count(NodeId node) const { return get(node).lock_count; }
  uint64_t last_use(NodeId node) const { return get(node).last_use; }
  std::span<const TokenId> tokens(NodeId node) const;
  const std::string& namespace_of(NodeId node) const { return get(get(node).root).ns; }
  // The node holding `block`, or kNoNode.
  NodeId node_of_block(BlockId block) const;
  // Children of `parent` (kNoNode: of the root of `ns`), ordered by block id.
  std::vector<NodeId> children(std::string_view ns, NodeId parent) const;

  int64_t num_nodes() const { return num_nodes_; }  // == cached blocks
  int64_t num_locked() const { return num_locked_; }
  int64_t num_evictable() const { return num_nodes_ - num_locked_; }
  int64_t num_namespaces() const { return static_cast<int64_t>(roots_.size()); }
  int64_t num_evicted() const { return num_evicted_; }

  // KV_CHECKs every invariant. O(nodes).
  void check_invariants() const;

  // Events: while `log` is set (not owned; null stops), insert() appends a BlockStored for each
  // new node (extending the last event when it continues the same prefix) and eviction a
  // BlockRemoved (consecutive removals in one event). The hash of a node:
  uint64_t block_hash(NodeId node) const;
  void set_event_log(std::vector<KvCacheEvent>* log) { event_log_ = log; }
  // The hashes of every cached block (what a router following the events should hold).
  std::vector<uint64_t> block_hashes() const;

 private:
  struct Node {
    NodeId parent = kNoNode;  // kNoNode for a namespace root
    NodeId root = kNoNode;    // the namespace root above (itself for a root)
    BlockId block = kNoBlock;
    int32_t lock_count = 0;
    int32_t child_locks = 0;  // sum of the children's lock counts
    uint64_t last_use = 0;
    uint64_t key = 0;    // HashBlockTokens(tokens); for a root, the hash of the namespace
    uint64_t chain = 0;  // namespace-free hash of the whole prefix (for miss reasons)
    std::unordered_map<uint64_t, NodeId> children;  // by key
    std::string ns;                                 // roots only
    bool live = false;
  };

  const Node& get(NodeId id) const;
  Node& get(NodeId id);
  NodeId new_node();
  NodeId root_of(std::string_view ns) const;  // kNoNode if absent
  bool is_evictable_leaf(const Node& n) const;
  void remove_leaf(NodeId id);
  void remember_eviction(uint64_t ns_key, uint64_t chain);
  PrefixMissReason miss_reason(uint64_t ns_key, uint64_t chain) const;

  int64_t block_size_;
  int64_t history_size_;
  std::vector<Node> nodes_;
  // The tokens of node i at [i * block_size, (i + 1) * block_size) (one allocation for all
  // nodes instead of one per node; roots leave theirs unused).
  std::vector<TokenId> token_arena_;
  std::vector<NodeId> free_nodes_;
  std::unordered_map<std::string, NodeId> roots_;
  std::vector<NodeId> node_of_block_;                  // indexed by block id; grown on demand
  std::set<std::pair<uint64_t, NodeId>> evictable_;    // (last_use, node) of unlocked leaves
  std::unordered_map<uint64_t, int32_t> live_chains_;  // chain -> nodes (all namespaces)
  // Eviction history: FIFO of (namespace-keyed chain, chain), with counts for lookup.
  std::deque<std::pair<uint64_t, uint64_t>> history_;
  std::unordered_map<uint64_t, int32_t> evicted_in_ns_;
  std::unordered_map<uint64_t, int32_t> evicted_any_ns_;
  std::vector<KvCacheEvent>* event_log_ = nullptr;
  uint64_t clock_ = 0;
  int64_t num_nodes_ = 0;
  int64_t num_locked_ = 0;
  int64_t num_evicted_ = 0;
};

}  // namespace kvserve

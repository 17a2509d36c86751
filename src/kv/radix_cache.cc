#include "kv/radix_cache.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"

namespace kvserve {
namespace {

constexpr uint64_t kSeed0 = 0xa0761d6478bd642full;
constexpr uint64_t kSeed1 = 0xe7037ed1a0b428dbull;
constexpr uint64_t kSeed2 = 0x8ebc6af09c88c6e3ull;

// 64x64 -> 128-bit multiply, folded (wyhash's mum).
inline uint64_t Mum(uint64_t a, uint64_t b) {
  const __uint128_t r = static_cast<__uint128_t>(a) * b;
  return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
}

inline uint64_t Combine(uint64_t a, uint64_t b) { return Mum(a ^ kSeed1, b ^ kSeed2); }

}  // namespace

uint64_t NamespaceKey(std::string_view s) {
  uint64_t h = kSeed0 ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = Combine(h, w);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  return Combine(h, tail ^ 0xffull);
}

uint64_t ExtendPrefixChain(uint64_t chain, std::span<const TokenId> block_tokens) {
  return Combine(chain, HashBlockTokens(block_tokens));
}

uint64_t PrefixBlockKey(uint64_t namespace_key, uint64_t chain) {
  return Combine(namespace_key, chain);
}

namespace {

void Increment(std::unordered_map<uint64_t, int32_t>& m, uint64_t k) { ++m[k]; }
void Decrement(std::unordered_map<uint64_t, int32_t>& m, uint64_t k) {
  auto it = m.find(k);
  KV_CHECK(it != m.end() && it->second > 0);
  if (--it->second == 0) m.erase(it);
}

}  // namespace

const char* PrefixMissReasonName(PrefixMissReason reason) {
  switch (reason) {
    case PrefixMissReason::kNeverSeen:
      return "never_seen";
    case PrefixMissReason::kEvicted:
      return "evicted";
    case PrefixMissReason::kOtherNamespace:
      return "other_namespace";
    case PrefixMissReason::kPartialBlock:
      return "partial_block";
    case PrefixMissReason::kLastTokenRecomputed:
      return "last_token";
  }
  return "?";
}

uint64_t HashBlockTokens(std::span<const TokenId> tokens) {
  const size_t n = tokens.size();
  const TokenId* p = tokens.data();
  uint64_t h = kSeed0 ^ (static_cast<uint64_t>(n) * kSeed1);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    uint64_t a, b;
    std::memcpy(&a, p + i, 8);
    std::memcpy(&b, p + i + 2, 8);
    h = Mum(a ^ kSeed1 ^ h, b ^ kSeed2);
  }
  for (; i < n; ++i) h = Combine(h, static_cast<uint32_t>(p[i]));
  return Mum(h ^ kSeed0, static_cast<uint64_t>(n) ^ kSeed2);
}

RadixCache::RadixCache(const RadixCacheOptions& options)
    : block_size_(options.block_size), history_size_(options.eviction_history_size) {
  KV_CHECK(block_size_ > 0) << "block_size=" << block_size_;
  KV_CHECK(history_size_ >= 0);
  KV_CHECK(options.reserve_blocks >= 0);
  if (options.reserve_blocks > 0) {
    // + a few namespace roots before the vectors have to grow.
    const size_t n = static_cast<size_t>(options.reserve_blocks) + 16;
    nodes_.reserve(n);
    token_arena_.reserve(n * static_cast<size_t>(block_size_));
    node_of_block_.reserve(static_cast<size_t>(options.reserve_blocks));
    live_chains_.reserve(static_cast<size_t>(options.reserve_blocks));
  }
  const size_t history_buckets = static_cast<size_t>(std::min<int64_t>(history_size_, 1 << 20));
  evicted_in_ns_.reserve(history_buckets);
  evicted_any_ns_.reserve(history_buckets);
}

const RadixCache::Node& RadixCache::get(NodeId id) const {
  KV_CHECK(id >= 0 && id < static_cast<NodeId>(nodes_.size()) && nodes_[id].live)
      << "no radix node " << id;
  return nodes_[static_cast<size_t>(id)];
}

RadixCache::Node& RadixCache::get(NodeId id) {
  return const_cast<Node&>(static_cast<const RadixCache*>(this)->get(id));
}

RadixCache::NodeId RadixCache::new_node() {
  NodeId id;
  if (!free_nodes_.empty()) {
    id = free_nodes_.back();
    free_nodes_.pop_back();
  } else {
    KV_CHECK(nodes_.size() < static_cast<size_t>(INT32_MAX));
    id = static_cast<NodeId>(nodes_.size());
    nodes_.emplace_back();
    token_arena_.resize(nodes_.size() * static_cast<size_t>(block_size_));
  }
  nodes_[static_cast<size_t>(id)] = Node();
  nodes_[static_cast<size_t>(id)].live = true;
  return id;
}

std::span<const TokenId> RadixCache::tokens(NodeId node) const {
  const Node& n = get(node);
  KV_CHECK(n.parent != kNoNode) << "tokens() of a namespace root";
  const size_t bs = static_cast<size_t>(block_size_);
  return std::span<const TokenId>(token_arena_).subspan(static_cast<size_t>(node) * bs, bs);
}

RadixCache::NodeId RadixCache::root_of(std::string_view ns) const {
  auto it = roots_.find(std::string(ns));
  return it == roots_.end() ? kNoNode : it->second;
}

RadixCache::NodeId RadixCache::parent(NodeId node) const {
  const Node& n = get(node);
  KV_CHECK(n.parent != kNoNode) << "parent() of a namespace root";
  return n.parent == n.root ? kNoNode : n.parent;
}

RadixCache::NodeId RadixCache::node_of_block(BlockId block) const {
  if (block < 0 || static_cast<size_t>(block) >= node_of_block_.size()) return kNoNode;
  return node_of_block_[static_cast<size_t>(block)];
}

std::vector<RadixCache::NodeId> RadixCache::children(std::string_view ns, NodeId parent) const {
  const NodeId p = parent == kNoNode ? root_of(ns) : parent;
  std::vector<NodeId> out;
  if (p == kNoNode) return out;
  for (const auto& [key, child] : get(p).children) out.push_back(child);
  std::sort(out.begin(), out.end(),
            [&](NodeId a, NodeId b) { return get(a).block < get(b).block; });
  return out;
}

bool RadixCache::is_evictable_leaf(const Node& n) const {
  return n.parent != kNoNode && n.lock_count == 0 && n.children.empty();
}

RadixCache::Match RadixCache::match(std::string_view ns, std::span<const TokenId> tokens,
                                    int64_t num_blocks) const {
  KV_CHECK(num_blocks >= 0 && static_cast<int64_t>(tokens.size()) >= num_blocks * block_size_)
      << "num_blocks=" << num_blocks << " tokens=" << tokens.size();
  Match m;
  NodeId cur = root_of(ns);
  const uint64_t ns_key = cur == kNoNode ? NamespaceKey(ns) : get(cur).key;
  uint64_t chain = kPrefixChainSeed;
  const size_t bs = static_cast<size_t>(block_size_);
  for (int64_t j = 0; j < num_blocks; ++j) {
    const std::span<const TokenId> block = tokens.subspan(static_cast<size_t>(j) * bs, bs);
    const uint64_t key = HashBlockTokens(block);
    chain = Combine(chain, key);  // ExtendPrefixChain, with the key reused
    if (cur != kNoNode) {
      const Node& n = get(cur);
      auto it = n.children.find(key);
      if (it != n.children.end()) {
        const std::span<const TokenId> child = this->tokens(it->second);
        if (std::equal(block.begin(), block.end(), child.begin())) {
          m.nodes.push_back(it->second);
          cur = it->second;
          continue;
        }
      }
      cur = kNoNode;  // the path ends here; classify the rest
    }
    m.misses.push_back(miss_reason(ns_key, chain));
  }
  return m;
}

PrefixMissReason RadixCache::miss_reason(uint64_t ns_key, uint64_t chain) const {
  if (evicted_in_ns_.count(PrefixBlockKey(ns_key, chain))) return PrefixMissReason::kEvicted;
  // Not in this namespace's tree (the caller's path ended above), so a live node with this
  // chain, or an eviction record not of this namespace, belongs to another namespace.
  if (live_chains_.count(chain) || evicted_any_ns_.count(chain)) {
    return PrefixMissReason::kOtherNamespace;
  }
  return PrefixMissReason::kNeverSeen;
}

RadixCache::InsertResult RadixCache::insert(std::string_view ns, NodeId parent,
                                            std::span<const TokenId> block_tokens, BlockId block) {
  KV_CHECK_EQ(static_cast<int64_t>(block_tokens.size()), block_size_);
  KV_CHECK(block >= 0) << "block=" << block;
  NodeId p = parent;
  if (p == kNoNode) {
    p = root_of(ns);
    if (p == kNoNode) {
      p = new_node();
      Node& r = get(p);
      r.root = p;
      r.ns = std::string(ns);
      r.key = NamespaceKey(ns);
      r.chain = kPrefixChainSeed;
      roots_.emplace(r.ns, p);
    }
  } else {
    KV_CHECK(get(get(p).root).ns == ns) << "parent node " << p << " is not in namespace " << ns;
  }
  const uint64_t key = HashBlockTokens(block_tokens);
  {
    const Node& pn = get(p);
    auto it = pn.children.find(key);
    if (it != pn.children.end()) {
      const std::span<const TokenId> child = tokens(it->second);
      if (std::equal(block_tokens.begin(), block_tokens.end(), child.begin())) {
        return {it->second, false};
      }
      return {kNoNode, false};  // a hash collision: leave the block private
    }
  }
  KV_CHECK(node_of_block(block) == kNoNode) << "block " << block << " is already in the tree";
  const NodeId id = new_node();  // may reallocate nodes_: no references held across it
  Node& n = get(id);
  Node& pn = get(p);
  if (is_evictable_leaf(pn)) evictable_.erase({pn.last_use, p});
  n.parent = p;
  n.root = pn.root;
  n.block = block;
  n.key = key;
  n.chain = Combine(pn.chain, key);
  std::copy(block_tokens.begin(), block_tokens.end(),
            token_arena_.begin() + static_cast<ptrdiff_t>(id) * block_size_);
  n.last_use = ++clock_;
  pn.children.emplace(key, id);
  Increment(live_chains_, n.chain);
  if (node_of_block_.size() <= static_cast<size_t>(block)) {
    node_of_block_.resize(static_cast<size_t>(block) + 1, kNoNode);
  }
  node_of_block_[static_cast<size_t>(block)] = id;
  evictable_.insert({n.last_use, id});
  ++num_nodes_;
  if (event_log_ != nullptr) {
    const uint64_t hash = block_hash(id);
    const std::optional<uint64_t> parent_hash =
        n.parent == n.root ? std::nullopt : std::optional<uint64_t>(block_hash(n.parent));
    if (!event_log_->empty() && event_log_->back().kind == KvCacheEvent::Kind::kBlockStored &&
        parent_hash.has_value() && event_log_->back().block_hashes.back() == *parent_hash) {
      KvCacheEvent& e = event_log_->back();
      e.block_hashes.push_back(hash);
      e.token_ids.insert(e.token_ids.end(), block_tokens.begin(), block_tokens.end());
    } else {
      event_log_->push_back({KvCacheEvent::Kind::kBlockStored, {hash}, parent_hash,
                             std::vector<TokenId>(block_tokens.begin(), block_tokens.end()), std::nullopt});
    }
  }
  return {id, true};
}

uint64_t RadixCache::block_hash(NodeId node) const {
  const Node& n = get(node);
  KV_CHECK(n.parent != kNoNode) << "block_hash of a namespace root";
  return PrefixBlockKey(get(n.root).key, n.chain);
}

std::vector<uint64_t> RadixCache::block_hashes() const {
  std::vector<uint64_t> out;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].live && nodes_[i].parent != kNoNode) out.push_back(block_hash(static_cast<NodeId>(i)));
  }
  return out;
}

void RadixCache::lock(NodeId node) {
  Node& n = get(node);
  KV_CHECK(n.parent != kNoNode) << "lock of a namespace root";
  Node& p = get(n.parent);
  if (p.parent != kNoNode) {
    KV_CHECK(p.lock_count > p.child_locks)
        << "lock of node " << node << " whose parent " << n.parent << " is not locked for it";
  }
  if (n.lock_count == 0) {
    if (is_evictable_leaf(n)) evictable_.erase({n.last_use, node});
    ++num_locked_;
  }
  ++n.lock_count;
  ++p.child_locks;
  n.last_use = ++clock_;
}

void RadixCache::unlock(NodeId node) {
  Node& n = get(node);
  KV_CHECK(n.parent != kNoNode) << "unlock of a namespace root";
  KV_CHECK(n.lock_count > n.child_locks) << "unlock of node " << node << " (lock " << n.lock_count
                                         << ") while its children hold " << n.child_locks;
  --n.lock_count;
  --get(n.parent).child_locks;
  n.last_use = ++clock_;
  if (n.lock_count == 0) {
    --num_locked_;
    if (is_evictable_leaf(n)) evictable_.insert({n.last_use, node});
  }
}

void RadixCache::remember_eviction(uint64_t ns_key, uint64_t chain) {
  if (history_size_ == 0) return;
  if (static_cast<int64_t>(history_.size()) == history_size_) {
    Decrement(evicted_in_ns_, history_.front().first);
    Decrement(evicted_any_ns_, history_.front().second);
    history_.pop_front();
  }
  const uint64_t k = PrefixBlockKey(ns_key, chain);
  history_.emplace_back(k, chain);
  Increment(evicted_in_ns_, k);
  Increment(evicted_any_ns_, chain);
}

void RadixCache::remove_leaf(NodeId id) {
  Node& n = get(id);
  KV_CHECK(is_evictable_leaf(n)) << "remove of node " << id << " that is locked or not a leaf";
  evictable_.erase({n.last_use, id});
  const NodeId p = n.parent;
  if (event_log_ != nullptr) {
    const uint64_t hash = block_hash(id);
    if (!event_log_->empty() && event_log_->back().kind == KvCacheEvent::Kind::kBlockRemoved) {
      event_log_->back().block_hashes.push_back(hash);
    } else {
      event_log_->push_back({KvCacheEvent::Kind::kBlockRemoved, {hash}, std::nullopt, {}, std::nullopt});
    }
  }
  remember_eviction(get(n.root).key, n.chain);
  Decrement(live_chains_, n.chain);
  node_of_block_[static_cast<size_t>(n.block)] = kNoNode;
  Node& pn = get(p);
  pn.children.erase(n.key);
  n = Node();  // live = false
  free_nodes_.push_back(id);
  --num_nodes_;
  if (pn.parent == kNoNode) {
    if (pn.children.empty()) {  // an empty namespace: drop its root
      roots_.erase(pn.ns);
      pn = Node();
      free_nodes_.push_back(p);
    }
  } else if (is_evictable_leaf(pn)) {
    evictable_.insert({pn.last_use, p});
  }
}

std::vector<BlockId> RadixCache::evict(int64_t num_blocks) {
  std::vector<BlockId> out;
  while (static_cast<int64_t>(out.size()) < num_blocks && !evictable_.empty()) {
    const NodeId id = evictable_.begin()->second;
    out.push_back(get(id).block);
    remove_leaf(id);
    ++num_evicted_;
  }
  return out;
}

void RadixCache::check_invariants() const {
  int64_t num_nodes = 0, num_locked = 0, num_leaves = 0, num_roots = 0;
  std::unordered_map<uint64_t, int32_t> chains;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (!n.live) continue;
    const NodeId id = static_cast<NodeId>(i);
    int32_t child_locks = 0;
    for (const auto& [key, c] : n.children) {
      const Node& child = get(c);
      KV_CHECK_EQ(child.parent, id);
      KV_CHECK_EQ(child.key, key);
      KV_CHECK_EQ(child.root, n.root);
      child_locks += child.lock_count;
    }
    KV_CHECK_EQ(child_locks, n.child_locks) << "node " << id;
    if (n.parent == kNoNode) {  // a namespace root
      ++num_roots;
      KV_CHECK_EQ(n.root, id);
      KV_CHECK(!n.children.empty()) << "empty namespace root " << n.ns;
      auto it = roots_.find(n.ns);
      KV_CHECK(it != roots_.end() && it->second == id);
      KV_CHECK_EQ(n.key, NamespaceKey(n.ns));
      KV_CHECK_EQ(n.lock_count, 0);
      continue;
    }
    ++num_nodes;
    KV_CHECK_GE(n.lock_count, n.child_locks) << "node " << id;
    if (n.lock_count > 0) ++num_locked;
    KV_CHECK_EQ(n.key, HashBlockTokens(tokens(id)));
    KV_CHECK_EQ(n.chain, Combine(get(n.parent).chain, n.key));
    KV_CHECK_EQ(node_of_block(n.block), id) << "block " << n.block;
    KV_CHECK_LE(n.last_use, clock_);
    ++chains[n.chain];
    const bool listed = evictable_.count({n.last_use, id}) > 0;
    KV_CHECK_EQ(listed, is_evictable_leaf(n)) << "node " << id;
    num_leaves += listed;
  }
  KV_CHECK_EQ(num_nodes, num_nodes_);
  KV_CHECK_EQ(num_locked, num_locked_);
  KV_CHECK_EQ(num_leaves, static_cast<int64_t>(evictable_.size()));
  KV_CHECK_EQ(num_roots, static_cast<int64_t>(roots_.size()));
  KV_CHECK(chains == live_chains_) << "live chain counts disagree";
  int64_t blocks_mapped = 0;
  for (NodeId id : node_of_block_) blocks_mapped += id != kNoNode;
  KV_CHECK_EQ(blocks_mapped, num_nodes_);
  KV_CHECK_LE(static_cast<int64_t>(history_.size()), history_size_);
  size_t in_ns = 0, any_ns = 0;
  for (const auto& [k, c] : evicted_in_ns_) in_ns += static_cast<size_t>(c);
  for (const auto& [k, c] : evicted_any_ns_) any_ns += static_cast<size_t>(c);
  KV_CHECK(in_ns == history_.size() && any_ns == history_.size());
}

}  // namespace kvserve

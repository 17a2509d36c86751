#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <span>
#include <unordered_map>

#include "base/check.h"

namespace kvserve {

namespace {

// A lookup's contribution to the stats, held until the sequence is admitted.
struct QueryCounts {
  int64_t tokens = 0;
  int64_t hit_tokens = 0;
  int64_t blocks = 0;
  int64_t hit_blocks = 0;
  int64_t miss_tokens[kNumPrefixMissReasons] = {};
};

struct Seq {
  explicit Seq(int64_t block_size) : table(block_size) {}
  std::string ns;
  BlockTable table;
  // Tree nodes spelled by the committed full blocks 0 .. path.size() - 1; each is locked
  // once by this sequence and referenced once (by the table or by extra_refs).
  std::vector<RadixCache::NodeId> path;
  // Blocks of path nodes that another sequence inserted first (the table holds a copy).
  std::vector<BlockId> extra_refs;
  bool insert_blocked = false;  // a hash collision ended the path: insert nothing more
  bool admitted = false;        // allocate_slots succeeded once: `query` is counted
  bool detached = false;        // compacted by token eviction: no path, no inserts
  QueryCounts query;
};

// `need` blocks from the pool (need <= pool.num_available()), evicting the tree's least
// recently used unlocked leaves for what the free list lacks.
std::vector<BlockId> TakeBlocks(BlockPool* pool, RadixCache* tree, int64_t need) {
  const int64_t shortfall = need - pool->num_free();
  if (shortfall > 0) {
    const std::vector<BlockId> evicted = tree->evict(shortfall);
    KV_CHECK_EQ(static_cast<int64_t>(evicted.size()), shortfall);
    for (BlockId b : evicted) {
      KV_CHECK_EQ(pool->ref_count(b), 0) << "evicted block " << b << " is referenced";
      pool->set_cached(b, false);
    }
  }
  std::vector<BlockId> ids;
  ids.reserve(static_cast<size_t>(need));
  KV_CHECK(pool->allocate(need, &ids));
  return ids;
}
}  // namespace

struct KvCacheManager::Impl {
  explicit Impl(const KvCacheManagerOptions& o)
      : options(o),
        pool(o.num_blocks),
        tree(RadixCacheOptions{
            .block_size = o.block_size,
            .eviction_history_size = o.eviction_history_size > 0
                                         ? o.eviction_history_size
                                         : std::max<int64_t>(4 * o.num_blocks, 1 << 16),
            .reserve_blocks = o.num_blocks}) {}

  Seq& seq(SeqId id) {
    auto it = seqs.find(id);
    KV_CHECK(it != seqs.end()) << "unknown sequence " << id;
    return it->second;
  }
  const Seq& seq(SeqId id) const {
    auto it = seqs.find(id);
    KV_CHECK(it != seqs.end()) << "unknown sequence " << id;
    return it->second;
  }

  KvCacheManagerOptions options;
  BlockPool pool;
  RadixCache tree;
  std::unordered_map<SeqId, Seq> seqs;
  QueryCounts totals;
  std::vector<KvCacheEvent> events;  // recorded by the tree (options.record_events)
  std::vector<StoredKvBlock> stored;  // options.record_stored_blocks
  int64_t num_queries = 0;
  int64_t num_hits = 0;
};

KvCacheManager::KvCacheManager(const KvCacheManagerOptions& options) {
  KV_CHECK(options.block_size > 0) << "block_size=" << options.block_size;
  KV_CHECK(options.num_blocks >= 0) << "num_blocks=" << options.num_blocks;
  impl_ = std::make_unique<Impl>(options);
  if (options.record_events) impl_->tree.set_event_log(&impl_->events);
  impl_->pool.set_evict_callback([](BlockId id) {
    KV_CHECK(false) << "BlockPool evicted block " << id
                    << " itself: KvCacheManager evicts through the radix tree";
  });
}

KvCacheManager::~KvCacheManager() = default;

std::vector<StoredKvBlock> KvCacheManager::take_stored_blocks() {
  std::vector<StoredKvBlock> out;
  out.reserve(impl_->stored.size());
  // Only blocks the tree still holds under the same key: one evicted since (and perhaps
  // reused by another sequence, its KV overwritten) must not be copied out under its old key.
  for (StoredKvBlock& b : impl_->stored) {
    const RadixCache::NodeId node = impl_->tree.node_of_block(b.block);
    if (node != RadixCache::kNoNode && impl_->tree.block_hash(node) == b.key) {
      out.push_back(std::move(b));
    }
  }
  impl_->stored.clear();
  return out;
}

int64_t KvCacheManager::import_blocks(
    const std::string& cache_namespace, const std::vector<TokenId>& tokens, int64_t first_block,
    int64_t num_blocks, const std::function<void(BlockId block, int64_t index)>& fill,
    int64_t* first_added) {
  Impl& im = *impl_;
  if (first_added != nullptr) *first_added = first_block;
  if (!im.options.enable_prefix_caching || num_blocks <= 0) return 0;
  const int64_t bs = block_size();
  const int64_t end_block = first_block + num_blocks;
  KV_CHECK(first_block >= 0 && end_block * bs <= static_cast<int64_t>(tokens.size()))
      << "import of blocks [" << first_block << ", " << end_block << ") of " << tokens.size()
      << " tokens";
  const RadixCache::Match rm = im.tree.match(cache_namespace, tokens, end_block);
  const auto matched = static_cast<int64_t>(rm.nodes.size());
  if (matched < first_block || matched >= end_block) return 0;
  if (first_added != nullptr) *first_added = matched;
  // Hold the prefix it extends (as a sequence would) so that taking blocks cannot evict it.
  for (RadixCache::NodeId n : rm.nodes) {
    im.tree.lock(n);
    im.pool.add_ref(im.tree.block(n));
  }
  const int64_t count = std::min(end_block - matched, im.pool.num_available());
  std::vector<BlockId> ids = TakeBlocks(&im.pool, &im.tree, count);
  const std::span<const TokenId> all(tokens);
  RadixCache::NodeId parent = rm.nodes.empty() ? RadixCache::kNoNode : rm.nodes.back();
  int64_t added = 0;
  for (; added < count; ++added) {
    const int64_t j = matched + added;
    const BlockId b = ids[static_cast<size_t>(added)];
    fill(b, j - first_block);
    const RadixCache::InsertResult res = im.tree.insert(
        cache_namespace, parent,
        all.subspan(static_cast<size_t>(j * bs), static_cast<size_t>(bs)), b);
    if (!res.inserted) break;  // a hash collision: stop here
    im.pool.set_cached(b, true);
    if (im.options.record_stored_blocks) {
      const auto first = all.begin() + static_cast<std::ptrdiff_t>(j * bs);
      im.stored.push_back({b, im.tree.block_hash(res.node),
                           parent == RadixCache::kNoNode ? 0 : im.tree.block_hash(parent),
                           std::vector<TokenId>(first, first + bs)});
    }
    parent = res.node;
  }
  // Every taken block returns: inserted ones become cached (evictable), the rest free.
  im.pool.release_all(ids);
  for (auto n = rm.nodes.rbegin(); n != rm.nodes.rend(); ++n) {
    im.tree.unlock(*n);
    im.pool.release(im.tree.block(*n));
  }
  return added;
}

std::vector<KvCacheEvent> KvCacheManager::take_events() {
  std::vector<KvCacheEvent> out;
  out.swap(impl_->events);
  return out;
}

bool KvCacheManager::reset_prefix_cache() {
  Impl& im = *impl_;
  if (im.tree.num_locked() > 0) return false;
  im.tree.set_event_log(nullptr);  // one AllBlocksCleared instead of a removal per block
  const std::vector<BlockId> evicted = im.tree.evict(im.tree.num_nodes());
  for (BlockId b : evicted) im.pool.set_cached(b, false);
  KV_CHECK_EQ(im.tree.num_nodes(), 0);
  if (im.options.record_events) {
    im.tree.set_event_log(&im.events);
    im.events.push_back({KvCacheEvent::Kind::kAllBlocksCleared, {}, std::nullopt, {}, std::nullopt});
  }
  return true;
}

int64_t KvCacheManager::block_size() const { return impl_->options.block_size; }
int64_t KvCacheManager::num_blocks() const { return impl_->options.num_blocks; }
bool KvCacheManager::prefix_caching_enabled() const { return impl_->options.enable_prefix_caching; }

PrefixMatch KvCacheManager::match(const std::string& cache_namespace,
                                  const std::vector<TokenId>& tokens,
                                  int64_t max_cached_tokens) const {
  PrefixMatch m;
  const int64_t num_tokens = static_cast<int64_t>(tokens.size());
  m.num_prompt_tokens = num_tokens;
  if (!impl_->options.enable_prefix_caching || num_tokens == 0) return m;
  const int64_t bs = block_size();
  const int64_t num_full = num_tokens / bs;
  // The last token is always computed, and so is every position whose logits are wanted.
  const int64_t max_cached =
      std::min((num_tokens - 1) / bs, std::max<int64_t>(max_cached_tokens, 0) / bs);
  const RadixCache::Match rm = impl_->tree.match(cache_namespace, tokens, num_full);
  const int64_t num_matched = static_cast<int64_t>(rm.nodes.size());
  const int64_t k = std::min(num_matched, max_cached);
  m.blocks.reserve(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) m.blocks.push_back(impl_->tree.block(rm.nodes[i]));
  m.num_cached_tokens = k * bs;
  m.miss_tokens[static_cast<int>(PrefixMissReason::kLastTokenRecomputed)] += (num_matched - k) * bs;
  for (PrefixMissReason r : rm.misses) m.miss_tokens[static_cast<int>(r)] += bs;
  m.miss_tokens[static_cast<int>(PrefixMissReason::kPartialBlock)] += num_tokens % bs;
  return m;
}

bool KvCacheManager::can_start(const PrefixMatch& match, int64_t num_tokens) const {
  const BlockPool& pool = impl_->pool;
  const int64_t bs = block_size();
  const int64_t need =
      std::max<int64_t>(0, (num_tokens + bs - 1) / bs - static_cast<int64_t>(match.blocks.size()));
  int64_t revived = 0;
  for (BlockId b : match.blocks) revived += pool.ref_count(b) == 0;
  return need <= pool.num_available() - revived;
}

void KvCacheManager::start_sequence(SeqId id, const std::string& cache_namespace,
                                    const PrefixMatch& match) {
  Impl& im = *impl_;
  KV_CHECK(!im.seqs.count(id)) << "sequence " << id << " already started";
  const int64_t bs = block_size();
  KV_CHECK_EQ(match.num_cached_tokens, static_cast<int64_t>(match.blocks.size()) * bs);
  KV_CHECK(match.blocks.empty() || im.options.enable_prefix_caching);
  Seq& s = im.seqs.emplace(id, Seq(bs)).first->second;
  s.ns = cache_namespace;
  RadixCache::NodeId prev = RadixCache::kNoNode;
  for (BlockId b : match.blocks) {
    const RadixCache::NodeId node = im.tree.node_of_block(b);
    KV_CHECK(node != RadixCache::kNoNode && im.tree.parent(node) == prev &&
             im.tree.namespace_of(node) == cache_namespace)
        << "stale prefix match for sequence " << id << ": block " << b
        << " is not where the match found it";
    im.tree.lock(node);
    im.pool.add_ref(b);
    s.path.push_back(node);
    prev = node;
  }
  s.table.append_blocks(match.blocks);
  s.table.set_num_tokens(match.num_cached_tokens);
  QueryCounts& q = s.query;
  q.tokens = match.num_prompt_tokens;
  q.hit_tokens = match.num_cached_tokens;
  q.blocks = match.num_prompt_tokens / bs;
  q.hit_blocks = static_cast<int64_t>(match.blocks.size());
  for (int r = 0; r < kNumPrefixMissReasons; ++r) q.miss_tokens[r] = match.miss_tokens[r];
}

int64_t KvCacheManager::blocks_needed(SeqId seq, int64_t num_tokens) const {
  return impl_->seq(seq).table.blocks_needed(num_tokens);
}

bool KvCacheManager::can_allocate(int64_t num_blocks) const {
  // Unlocked tree nodes are exactly the pool's cached (unreferenced) blocks, and all of them
  // can be evicted, leaves first.
  return num_blocks <= impl_->pool.num_available();
}

bool KvCacheManager::allocate_slots(SeqId id, int64_t num_tokens) {
  Impl& im = *impl_;
  Seq& s = im.seq(id);
  const int64_t need = s.table.blocks_needed(num_tokens);
  if (need > 0) {
    if (!can_allocate(need)) return false;
    s.table.append_blocks(TakeBlocks(&im.pool, &im.tree, need));
  }
  if (!s.admitted) {
    s.admitted = true;
    QueryCounts& t = im.totals;
    t.tokens += s.query.tokens;
    t.hit_tokens += s.query.hit_tokens;
    t.blocks += s.query.blocks;
    t.hit_blocks += s.query.hit_blocks;
    for (int r = 0; r < kNumPrefixMissReasons; ++r) t.miss_tokens[r] += s.query.miss_tokens[r];
    ++im.num_queries;
    im.num_hits += s.query.hit_blocks > 0;
  }
  return true;
}

void KvCacheManager::commit(SeqId id, const std::vector<TokenId>& tokens, int64_t num_computed) {
  Impl& im = *impl_;
  Seq& s = im.seq(id);
  KV_CHECK(!s.detached) << "commit of detached sequence " << id;
  KV_CHECK(num_computed <= static_cast<int64_t>(tokens.size()))
      << "commit of " << num_computed << " tokens with " << tokens.size() << " known";
  KV_CHECK(num_computed >= s.table.num_tokens())
      << "commit of " << num_computed << " tokens after " << s.table.num_tokens();
  s.table.set_num_tokens(num_computed);
  if (!im.options.enable_prefix_caching || s.insert_blocked) return;
  const int64_t bs = block_size();
  const int64_t num_full = num_computed / bs;
  const std::span<const TokenId> all(tokens);
  while (static_cast<int64_t>(s.path.size()) < num_full) {
    const size_t j = s.path.size();
    const RadixCache::NodeId parent = s.path.empty() ? RadixCache::kNoNode : s.path.back();
    const BlockId b = s.table.block_ids()[j];
    const RadixCache::InsertResult res = im.tree.insert(
        s.ns, parent, all.subspan(j * static_cast<size_t>(bs), static_cast<size_t>(bs)), b);
    if (res.node == RadixCache::kNoNode) {  // hash collision with other tokens
      s.insert_blocked = true;
      return;
    }
    im.tree.lock(res.node);
    if (res.inserted) {
      im.pool.set_cached(b, true);
      if (im.options.record_stored_blocks) {
        const auto first = all.begin() + static_cast<std::ptrdiff_t>(j) * bs;
        im.stored.push_back({b, im.tree.block_hash(res.node),
                             parent == RadixCache::kNoNode ? 0 : im.tree.block_hash(parent),
                             std::vector<TokenId>(first, first + bs)});
      }
    } else {
      // Another sequence computed these tokens first: keep our copy in the table, hold theirs.
      const BlockId theirs = im.tree.block(res.node);
      KV_CHECK_NE(theirs, b);
      im.pool.add_ref(theirs);
      s.extra_refs.push_back(theirs);
    }
    s.path.push_back(res.node);
  }
}

bool KvCacheManager::can_compact(SeqId id, int64_t num_kv_tokens) const {
  const Impl& im = *impl_;
  const Seq& s = im.seq(id);
  int64_t returned = 0;  // blocks only this sequence holds
  for (BlockId b : s.table.block_ids()) returned += im.pool.ref_count(b) == 1;
  for (BlockId b : s.extra_refs) returned += im.pool.ref_count(b) == 1;
  const int64_t need = (num_kv_tokens + im.options.block_size - 1) / im.options.block_size;
  return need <= im.pool.num_available() + returned;
}

void KvCacheManager::compact(SeqId id, int64_t num_kv_tokens,
                             const std::function<void(const BlockTable& from)>& gather,
                             const std::function<void(const BlockTable& to)>& scatter) {
  Impl& im = *impl_;
  Seq& s = im.seq(id);
  KV_CHECK(num_kv_tokens >= 1 && num_kv_tokens <= s.table.num_tokens())
      << "compaction of sequence " << id << " to " << num_kv_tokens << " of "
      << s.table.num_tokens() << " tokens";
  KV_CHECK(can_compact(id, num_kv_tokens))
      << "compaction of sequence " << id << " without the blocks for its new table";
  gather(s.table);
  for (auto n = s.path.rbegin(); n != s.path.rend(); ++n) im.tree.unlock(*n);
  im.pool.release_all(s.table.clear());
  im.pool.release_all(s.extra_refs);
  s.path.clear();
  s.extra_refs.clear();
  s.detached = true;
  KV_CHECK(allocate_slots(id, num_kv_tokens)) << "compaction of sequence " << id
                                              << " found fewer blocks than can_compact said";
  s.table.set_num_tokens(num_kv_tokens);
  scatter(s.table);
}

void KvCacheManager::commit_detached(SeqId id, int64_t num_kv_tokens) {
  Seq& s = impl_->seq(id);
  KV_CHECK(s.detached) << "commit_detached of attached sequence " << id;
  KV_CHECK(num_kv_tokens >= s.table.num_tokens())
      << "commit of " << num_kv_tokens << " tokens after " << s.table.num_tokens();
  s.table.set_num_tokens(num_kv_tokens);
}

bool KvCacheManager::is_detached(SeqId id) const { return impl_->seq(id).detached; }

void KvCacheManager::free(SeqId id) {
  Impl& im = *impl_;
  auto it = im.seqs.find(id);
  KV_CHECK(it != im.seqs.end()) << "free of unknown sequence " << id;
  Seq& s = it->second;
  for (auto n = s.path.rbegin(); n != s.path.rend(); ++n) im.tree.unlock(*n);
  im.pool.release_all(s.table.clear());
  im.pool.release_all(s.extra_refs);
  im.seqs.erase(it);
}

const BlockTable& KvCacheManager::block_table(SeqId seq) const { return impl_->seq(seq).table; }

bool KvCacheManager::has_sequence(SeqId seq) const { return impl_->seqs.count(seq) > 0; }

int64_t KvCacheManager::num_sequences() const { return static_cast<int64_t>(impl_->seqs.size()); }

const RadixCache& KvCacheManager::radix_cache() const { return impl_->tree; }

KvMemoryStats KvCacheManager::memory_stats(const KvCacheSpec& spec) const {
  std::vector<const BlockTable*> tables;
  tables.reserve(impl_->seqs.size());
  for (const auto& [id, seq] : impl_->seqs) tables.push_back(&seq.table);
  return ComputeKvMemoryStats(spec, impl_->pool, tables);
}

KvCacheManagerStats KvCacheManager::stats() const {
  const Impl& im = *impl_;
  KvCacheManagerStats st;
  st.num_blocks = num_blocks();
  st.blocks_in_use = im.pool.num_in_use();
  st.blocks_cached = im.pool.num_cached();
  st.blocks_free = im.pool.num_free();
  st.blocks_in_prefix_cache = im.tree.num_nodes();
  st.prefix_queries = im.num_queries;
  st.prefix_hits = im.num_hits;
  st.prefix_queries_tokens = im.totals.tokens;
  st.prefix_hits_tokens = im.totals.hit_tokens;
  st.prefix_queries_blocks = im.totals.blocks;
  st.prefix_hits_blocks = im.totals.hit_blocks;
  st.evicted_blocks = im.tree.num_evicted();
  for (int r = 0; r < kNumPrefixMissReasons; ++r) st.miss_tokens[r] = im.totals.miss_tokens[r];
  return st;
}

void KvCacheManager::check_invariants() const {
  const Impl& im = *impl_;
  const BlockPool& pool = im.pool;
  const RadixCache& tree = im.tree;
  pool.check_invariants();
  tree.check_invariants();
  KV_CHECK_EQ(pool.num_evicted(), 0);
  const int64_t bs = block_size();
  std::vector<int32_t> refs(static_cast<size_t>(num_blocks()), 0);
  std::unordered_map<RadixCache::NodeId, int32_t> locks;
  for (const auto& [id, s] : im.seqs) {
    const BlockTable& t = s.table;
    KV_CHECK_EQ(t.block_size(), bs);
    KV_CHECK_LE(t.num_tokens(), t.capacity_tokens());
    KV_CHECK_LE(static_cast<int64_t>(s.path.size()) * bs, t.num_tokens()) << "sequence " << id;
    size_t num_extra = 0;
    for (size_t j = 0; j < s.path.size(); ++j) {
      const RadixCache::NodeId node = s.path[j];
      KV_CHECK_EQ(tree.parent(node), j == 0 ? RadixCache::kNoNode : s.path[j - 1]);
      KV_CHECK(tree.namespace_of(node) == s.ns) << "sequence " << id;
      ++locks[node];
      const BlockId b = tree.block(node);
      if (b != t.block_ids()[j]) {
        KV_CHECK(num_extra < s.extra_refs.size() && s.extra_refs[num_extra] == b)
            << "sequence " << id << " path block " << j;
        ++num_extra;
      }
    }
    KV_CHECK_EQ(num_extra, s.extra_refs.size()) << "sequence " << id;
    for (BlockId b : t.block_ids()) ++refs[static_cast<size_t>(b)];
    for (BlockId b : s.extra_refs) ++refs[static_cast<size_t>(b)];
  }
  for (BlockId b = 0; b < num_blocks(); ++b) {
    KV_CHECK_EQ(pool.ref_count(b), refs[static_cast<size_t>(b)]) << "block " << b;
    const RadixCache::NodeId node = tree.node_of_block(b);
    if (node == RadixCache::kNoNode) {
      KV_CHECK(!pool.is_cached(b)) << "block " << b << " cached outside the tree";
    } else {
      KV_CHECK(pool.is_cached(b)) << "tree block " << b << " not cached in the pool";
      auto it = locks.find(node);
      const int32_t expected = it == locks.end() ? 0 : it->second;
      KV_CHECK_EQ(tree.lock_count(node), expected) << "block " << b;
      KV_CHECK_EQ(pool.ref_count(b), expected) << "block " << b;
    }
  }
  KV_CHECK_EQ(pool.num_cached(), tree.num_evictable());
  if (!im.options.enable_prefix_caching) KV_CHECK_EQ(tree.num_nodes(), 0);
  if (im.seqs.empty()) {
    KV_CHECK_EQ(pool.num_in_use(), 0) << "blocks still in use with no live sequence";
  }
}

}  // namespace kvserve

#include "kv/kv_cache_manager.h"

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvserve {
namespace {

using ::testing::ElementsAre;
using R = PrefixMissReason;

int64_t Miss(const PrefixMatch& m, R r) { return m.miss_tokens[static_cast<int>(r)]; }
int64_t Miss(const KvCacheManagerStats& s, R r) { return s.miss_tokens[static_cast<int>(r)]; }

std::vector<TokenId> Range(TokenId first, TokenId last) {  // [first, last]
  std::vector<TokenId> t;
  for (TokenId x = first; x <= last; ++x) t.push_back(x);
  return t;
}

std::vector<TokenId> Concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The scheduler's admission of a prompt: match, start, allocate, compute it all, commit.
PrefixMatch Admit(KvCacheManager& kv, SeqId id, const std::string& ns,
                  const std::vector<TokenId>& prompt) {
  const PrefixMatch m = kv.match(ns, prompt);
  kv.start_sequence(id, ns, m);
  kv.check_invariants();
  EXPECT_TRUE(kv.allocate_slots(id, static_cast<int64_t>(prompt.size())));
  kv.check_invariants();
  kv.commit(id, prompt, static_cast<int64_t>(prompt.size()));
  kv.check_invariants();
  return m;
}

void Free(KvCacheManager& kv, SeqId id) {
  kv.free(id);
  kv.check_invariants();
}

TEST(KvCacheManagerTest, SharedPrefixHitWithExactBlockIds) {
  KvCacheManager kv({.num_blocks = 8, .block_size = 4});
  const auto p1 = Range(1, 10);  // 2 full blocks + 2 tokens
  PrefixMatch m = Admit(kv, 1, "m", p1);
  EXPECT_EQ(m.num_prompt_tokens, 10);
  EXPECT_EQ(m.num_cached_tokens, 0);
  EXPECT_EQ(Miss(m, R::kNeverSeen), 8);
  EXPECT_EQ(Miss(m, R::kPartialBlock), 2);
  EXPECT_THAT(kv.block_table(1).block_ids(), ElementsAre(0, 1, 2));
  EXPECT_EQ(kv.block_table(1).num_tokens(), 10);

  const auto p2 = Concat(Range(1, 8), {20, 21, 22});
  m = Admit(kv, 2, "m", p2);
  EXPECT_EQ(m.num_cached_tokens, 8);
  EXPECT_THAT(m.blocks, ElementsAre(0, 1));
  EXPECT_EQ(Miss(m, R::kPartialBlock), 3);
  EXPECT_THAT(kv.block_table(2).block_ids(), ElementsAre(0, 1, 3));

  KvCacheManagerStats st = kv.stats();
  EXPECT_EQ(st.blocks_in_use, 4);
  EXPECT_EQ(st.blocks_in_prefix_cache, 2);
  EXPECT_EQ(st.prefix_queries, 2);
  EXPECT_EQ(st.prefix_hits, 1);
  EXPECT_EQ(st.prefix_queries_tokens, 21);
  EXPECT_EQ(st.prefix_hits_tokens, 8);
  EXPECT_EQ(st.prefix_queries_blocks, 4);
  EXPECT_EQ(st.prefix_hits_blocks, 2);

  Free(kv, 1);
  st = kv.stats();
  EXPECT_EQ(st.blocks_in_use, 3);  // 0 and 1 are still held by sequence 2
  EXPECT_EQ(st.blocks_free, 5);
  Free(kv, 2);
  st = kv.stats();
  EXPECT_EQ(st.blocks_in_use, 0);
  EXPECT_EQ(st.blocks_cached, 2);
  EXPECT_EQ(st.blocks_free, 6);
  EXPECT_EQ(st.blocks_in_prefix_cache, 2);
}

TEST(KvCacheManagerTest, EvictsLeastRecentlyUsedLeavesWhenThePoolRunsShort) {
  KvCacheManager kv({.num_blocks = 4, .block_size = 2});
  Admit(kv, 1, "m", {1, 2, 3, 4, 5});  // blocks 0 (1 2), 1 (3 4), 2 (5)
  Free(kv, 1);                         // 2 free; 1 then 0 released (leaf first)
  Admit(kv, 2, "m", {7, 8, 9});        // blocks 2 (7 8), 3 (9)
  Free(kv, 2);                         // 3 free; 2 cached
  EXPECT_EQ(kv.stats().blocks_cached, 3);
  EXPECT_EQ(kv.stats().blocks_free, 1);

  // Needs 4 blocks: block 3 is free, then evict 1 (oldest leaf), 0 (a leaf now, released
  // before 2), 2. The pool then hands out the lowest free ids.
  const auto p3 = Range(11, 17);
  EXPECT_TRUE(kv.can_allocate(4));
  EXPECT_FALSE(kv.can_allocate(5));
  Admit(kv, 3, "m", p3);
  EXPECT_THAT(kv.block_table(3).block_ids(), ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(kv.stats().evicted_blocks, 3);
  EXPECT_EQ(kv.radix_cache().num_nodes(), 3);  // sequence 3's full blocks

  // Sequence 1's prompt again: both blocks were evicted.
  const PrefixMatch m = kv.match("m", {1, 2, 3, 4, 5});
  EXPECT_EQ(m.num_cached_tokens, 0);
  EXPECT_EQ(Miss(m, R::kEvicted), 4);
  EXPECT_EQ(Miss(m, R::kPartialBlock), 1);
  // Nothing can be allocated while sequence 3 holds everything.
  EXPECT_FALSE(kv.can_allocate(1));
  Free(kv, 3);
}

TEST(KvCacheManagerTest, LockedBlocksSurviveMemoryPressure) {
  KvCacheManager kv({.num_blocks = 4, .block_size = 2});
  Admit(kv, 1, "m", {1, 2, 3, 4, 5});  // 0, 1 cached + 2 partial
  Free(kv, 1);
  // Sequence 2 reuses block 0 only and keeps running.
  const PrefixMatch m = Admit(kv, 2, "m", {1, 2, 6});
  EXPECT_THAT(m.blocks, ElementsAre(0));
  EXPECT_THAT(kv.block_table(2).block_ids(), ElementsAre(0, 2));
  // Three blocks available: free 3, evictable 1 (block 0 is locked: 1 is a leaf of it).
  EXPECT_TRUE(kv.can_allocate(2));
  EXPECT_FALSE(kv.can_allocate(3));
  const auto p3 = Range(20, 23);
  const PrefixMatch m3 = kv.match("m", p3);
  EXPECT_TRUE(kv.can_start(m3, 4));
  EXPECT_FALSE(kv.can_start(m3, 5));
  Admit(kv, 3, "m", p3);
  EXPECT_THAT(kv.block_table(3).block_ids(), ElementsAre(1, 3));
  EXPECT_NE(kv.radix_cache().node_of_block(0), RadixCache::kNoNode);  // still cached
  Free(kv, 2);
  Free(kv, 3);
}

TEST(KvCacheManagerTest, TheLastPromptTokenIsAlwaysComputed) {
  KvCacheManager kv({.num_blocks = 8, .block_size = 2});
  Admit(kv, 1, "m", {1, 2, 3, 4});
  Free(kv, 1);
  // Fully cached, block-aligned: the last block is recomputed.
  PrefixMatch m = kv.match("m", {1, 2, 3, 4});
  EXPECT_EQ(m.num_cached_tokens, 2);
  EXPECT_EQ(Miss(m, R::kLastTokenRecomputed), 2);
  // One more token: both blocks hit.
  m = kv.match("m", {1, 2, 3, 4, 5});
  EXPECT_EQ(m.num_cached_tokens, 4);
  EXPECT_EQ(Miss(m, R::kPartialBlock), 1);
  EXPECT_EQ(Miss(m, R::kLastTokenRecomputed), 0);
  // A one-token prompt never hits.
  m = kv.match("m", {1});
  EXPECT_EQ(m.num_cached_tokens, 0);
  EXPECT_EQ(Miss(m, R::kPartialBlock), 1);
  // The cached blocks are shared by the new sequence; its last block is its own.
  m = Admit(kv, 2, "m", {1, 2, 3, 4});
  EXPECT_THAT(kv.block_table(2).block_ids(), ElementsAre(0, 2));
  // Committing finds (1 2 | 3 4) already in the tree under block 1: block 2 stays private and
  // the tree's block 1 is held as an extra reference.
  EXPECT_EQ(kv.stats().blocks_in_use, 3);
  Free(kv, 2);
  EXPECT_EQ(kv.stats().blocks_cached, 2);
  EXPECT_EQ(kv.stats().blocks_free, 6);
}

TEST(KvCacheManagerTest, NamespacesNeverShareBlocks) {
  KvCacheManager kv({.num_blocks = 8, .block_size = 2});
  const std::vector<TokenId> p = {1, 2, 3, 4, 5};
  Admit(kv, 1, "model|tenant-a", p);
  PrefixMatch m = Admit(kv, 2, "model|tenant-b", p);
  EXPECT_EQ(m.num_cached_tokens, 0);
  EXPECT_EQ(Miss(m, R::kOtherNamespace), 4);
  EXPECT_EQ(Miss(m, R::kPartialBlock), 1);
  EXPECT_THAT(kv.block_table(2).block_ids(), ElementsAre(3, 4, 5));
  m = Admit(kv, 3, "model|tenant-a", p);
  EXPECT_THAT(m.blocks, ElementsAre(0, 1));
  Free(kv, 1);
  Free(kv, 2);
  Free(kv, 3);
  EXPECT_EQ(kv.radix_cache().num_namespaces(), 2);
  const KvCacheManagerStats st = kv.stats();
  EXPECT_EQ(Miss(st, R::kNeverSeen), 4);
  EXPECT_EQ(Miss(st, R::kOtherNamespace), 4);
  EXPECT_EQ(Miss(st, R::kPartialBlock), 3);
  EXPECT_EQ(st.prefix_hits_tokens, 4);
  EXPECT_EQ(st.prefix_queries_tokens, 15);
}

TEST(KvCacheManagerTest, AnAbortedRequestReturnsAllItsBlocks) {
  KvCacheManager kv({.num_blocks = 16, .block_size = 4});
  const auto prompt = Range(1, 30);
  Admit(kv, 1, "m", Range(1, 12));  // caches 3 blocks
  const PrefixMatch m = kv.match("m", prompt);
  EXPECT_EQ(m.num_cached_tokens, 12);
  kv.start_sequence(2, "m", m);
  // Chunked prefill: 8 tokens, then abort in the middle of the next chunk.
  ASSERT_TRUE(kv.allocate_slots(2, 20));
  kv.check_invariants();
  kv.commit(2, prompt, 20);
  kv.check_invariants();
  ASSERT_TRUE(kv.allocate_slots(2, 28));
  kv.check_invariants();
  EXPECT_EQ(kv.block_table(2).num_blocks(), 7);
  Free(kv, 1);
  Free(kv, 2);  // the abort
  const KvCacheManagerStats st = kv.stats();
  EXPECT_EQ(st.blocks_in_use, 0);
  EXPECT_EQ(st.blocks_cached, 5);  // 3 + the 2 committed by sequence 2
  EXPECT_EQ(st.blocks_free + st.blocks_cached, 16);
  EXPECT_EQ(kv.num_sequences(), 0);
}

TEST(KvCacheManagerTest, ConcurrentDuplicatesKeepTheTreeBlock) {
  KvCacheManager kv({.num_blocks = 8, .block_size = 2});
  const std::vector<TokenId> p = {1, 2, 3, 4, 5};
  // Both start before either commits: no hit for either.
  for (SeqId id : {1, 2}) {
    kv.start_sequence(id, "m", kv.match("m", p));
    ASSERT_TRUE(kv.allocate_slots(id, 5));
    kv.check_invariants();
  }
  kv.commit(1, p, 5);
  kv.check_invariants();
  kv.commit(2, p, 5);
  kv.check_invariants();
  EXPECT_THAT(kv.block_table(2).block_ids(), ElementsAre(3, 4, 5));  // its own copies
  EXPECT_EQ(kv.radix_cache().num_nodes(), 2);                        // blocks 0 and 1
  Free(kv, 1);
  // Sequence 2 still protects the tree's blocks 0 and 1 (extra references).
  EXPECT_EQ(kv.stats().blocks_in_use, 5);
  EXPECT_EQ(kv.stats().blocks_cached, 0);
  EXPECT_FALSE(kv.can_allocate(4));
  Free(kv, 2);
  EXPECT_EQ(kv.stats().blocks_cached, 2);
  EXPECT_EQ(kv.stats().blocks_free, 6);
}

TEST(KvCacheManagerTest, AnAdmissionThatDoesNotFitIsNotCounted) {
  KvCacheManager kv({.num_blocks = 2, .block_size = 2});
  const PrefixMatch m = kv.match("m", {1, 2, 3, 4, 5});
  EXPECT_FALSE(kv.can_start(m, 5));
  kv.start_sequence(1, "m", m);
  EXPECT_FALSE(kv.allocate_slots(1, 5));
  kv.check_invariants();
  Free(kv, 1);
  const KvCacheManagerStats st = kv.stats();
  EXPECT_EQ(st.prefix_queries, 0);
  EXPECT_EQ(st.prefix_queries_tokens, 0);
  EXPECT_EQ(st.blocks_free, 2);
}

TEST(KvCacheManagerTest, PreemptedSequenceRestartsFromItsOwnBlocks) {
  KvCacheManager kv({.num_blocks = 8, .block_size = 2});
  std::vector<TokenId> tokens = {1, 2, 3};
  Admit(kv, 1, "m", tokens);
  // Decode three tokens, committing after each.
  for (TokenId t : {10, 11, 12}) {
    tokens.push_back(t);
    ASSERT_TRUE(kv.allocate_slots(1, static_cast<int64_t>(tokens.size())));
    kv.commit(1, tokens, static_cast<int64_t>(tokens.size()));
    kv.check_invariants();
  }
  EXPECT_EQ(kv.radix_cache().num_nodes(), 3);  // 1 2 | 3 10 | 11 12
  Free(kv, 1);                                 // preempted
  const PrefixMatch m = kv.match("m", tokens);
  EXPECT_EQ(m.num_cached_tokens, 4);  // 6 tokens, block-aligned: the last block is recomputed
  EXPECT_EQ(Miss(m, R::kLastTokenRecomputed), 2);
}

TEST(KvCacheManagerTest, DisabledPrefixCachingSharesNothing) {
  KvCacheManager kv({.num_blocks = 8, .block_size = 2, .enable_prefix_caching = false});
  const std::vector<TokenId> p = {1, 2, 3, 4, 5};
  Admit(kv, 1, "m", p);
  const PrefixMatch m = Admit(kv, 2, "m", p);
  EXPECT_EQ(m.num_cached_tokens, 0);
  EXPECT_TRUE(m.blocks.empty());
  EXPECT_EQ(kv.radix_cache().num_nodes(), 0);
  Free(kv, 1);
  Free(kv, 2);
  const KvCacheManagerStats st = kv.stats();
  EXPECT_EQ(st.blocks_free, 8);
  EXPECT_EQ(st.blocks_cached, 0);
  EXPECT_EQ(st.prefix_queries_tokens, 10);
  EXPECT_EQ(st.prefix_hits_tokens, 0);
}

// A random workload of sequences that share prefixes, under memory pressure: the manager's
// invariants hold after every operation, every hit serves blocks whose (fake) KV holds exactly
// the prompt's tokens, miss reasons add up, and nothing leaks at the end.
TEST(KvCacheManagerTest, RandomWorkloadKeepsInvariantsAndServesCorrectKv) {
  for (bool enable : {true, false}) {
    std::mt19937 rng(enable ? 99 : 100);
    const int64_t bs = 3;
    KvCacheManager kv({.num_blocks = 40, .block_size = bs, .enable_prefix_caching = enable});
    std::vector<std::vector<TokenId>> documents;
    for (int d = 0; d < 6; ++d) {
      std::vector<TokenId> t(24);
      for (auto& x : t) x = static_cast<TokenId>(rng() % 4);
      documents.push_back(t);
    }
    // Fake KV: the tokens written into each block slot.
    std::vector<TokenId> kv_slots(static_cast<size_t>(40 * bs), kNoToken);
    struct Live {
      std::vector<TokenId> tokens;
      std::string ns;
      int64_t computed = 0;
      int64_t target = 0;
    };
    std::map<SeqId, Live> live;
    SeqId next_id = 0;
    int64_t hits = 0;
    int64_t dup_steps = 0;
    for (int step = 0; step < 4000; ++step) {
      const int op = static_cast<int>(rng() % 6);
      if (op < 2) {
        // A new request: a prefix of a document, maybe with its own tail.
        Live l;
        const auto& doc = documents[rng() % documents.size()];
        l.tokens.assign(doc.begin(), doc.begin() + 1 + static_cast<long>(rng() % doc.size()));
        for (int i = static_cast<int>(rng() % 4); i > 0; --i)
          l.tokens.push_back(4 + static_cast<TokenId>(rng() % 3));
        l.ns = rng() % 4 == 0 ? "m|salt" : "m";
        const PrefixMatch m = kv.match(l.ns, l.tokens);
        const int64_t n = static_cast<int64_t>(l.tokens.size());
        ASSERT_LT(m.num_cached_tokens, n);
        ASSERT_EQ(m.num_cached_tokens % bs, 0);
        if (enable) {
          int64_t sum = m.num_cached_tokens;
          for (int64_t x : m.miss_tokens) sum += x;
          ASSERT_EQ(sum, n);
        }
        for (size_t b = 0; b < m.blocks.size(); ++b) {
          for (int64_t o = 0; o < bs; ++o) {
            ASSERT_EQ(kv_slots[static_cast<size_t>(m.blocks[b] * bs + o)],
                      l.tokens[b * bs + static_cast<size_t>(o)]);
          }
        }
        hits += !m.blocks.empty();
        const bool fits = kv.can_start(m, n);
        const SeqId id = next_id++;
        kv.start_sequence(id, l.ns, m);
        ASSERT_EQ(kv.allocate_slots(id, n), fits);
        if (!fits) {
          kv.free(id);
        } else {
          l.computed = m.num_cached_tokens;
          l.target = n + static_cast<int64_t>(rng() % 5);  // some decode tokens
          live[id] = l;
        }
      } else if (op < 5 && !live.empty()) {
        // Advance a sequence: a chunk of prefill or one decode token.
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        Live& l = it->second;
        if (l.computed == l.target) continue;
        const int64_t chunk = 1 + static_cast<int64_t>(rng() % 7);
        const int64_t upto = std::min(l.target, l.computed + chunk);
        while (static_cast<int64_t>(l.tokens.size()) < upto)
          l.tokens.push_back(7 + static_cast<TokenId>(rng() % 2));
        if (!kv.allocate_slots(it->first, upto)) {
          kv.free(it->first);  // preempted
          live.erase(it);
        } else {
          const BlockTable& t = kv.block_table(it->first);
          for (int64_t p = l.computed; p < upto; ++p)
            kv_slots[static_cast<size_t>(t.slot(p))] = l.tokens[p];
          kv.commit(it->first, l.tokens, upto);
          l.computed = upto;
        }
      } else if (!live.empty()) {
        // Finish or abort.
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        kv.free(it->first);
        live.erase(it);
      }
      kv.check_invariants();
      // Extra references (a duplicate computed concurrently) show as more blocks in use than
      // the live tables hold.
      std::set<BlockId> held;
      for (const auto& [id, l] : live) {
        for (BlockId b : kv.block_table(id).block_ids()) held.insert(b);
      }
      dup_steps += kv.stats().blocks_in_use > static_cast<int64_t>(held.size());
    }
    for (const auto& [id, l] : live) kv.free(id);
    kv.check_invariants();
    const KvCacheManagerStats st = kv.stats();
    EXPECT_EQ(st.blocks_in_use, 0);
    EXPECT_EQ(st.blocks_free + st.blocks_cached, 40);
    if (enable) {
      EXPECT_GT(hits, 100);
      EXPECT_GT(dup_steps, 0);
      EXPECT_GT(st.evicted_blocks, 0);
      EXPECT_GT(Miss(st, R::kEvicted), 0);
      EXPECT_GT(Miss(st, R::kOtherNamespace), 0);
      int64_t sum = st.prefix_hits_tokens;
      for (int64_t x : st.miss_tokens) sum += x;
      EXPECT_EQ(sum, st.prefix_queries_tokens);
    } else {
      EXPECT_EQ(hits, 0);
      EXPECT_EQ(st.blocks_free, 40);
    }
  }
}

}  // namespace
}  // namespace kvserve

namespace kvserve {
namespace {

// A router following the events (kv_events.h) holds exactly the cache's blocks, at every step
// of a random workload with evictions, namespaces and duplicates; reset_prefix_cache clears
// them with one AllBlocksCleared.
TEST(KvCacheManagerTest, EventsReplayToTheCachesOwnBlocks) {
  std::mt19937 rng(7);
  const int64_t bs = 3;
  KvCacheManager kv({.num_blocks = 30, .block_size = bs, .record_events = true});
  std::set<uint64_t> router;
  int64_t stored = 0, removed = 0;
  auto follow = [&] {
    for (const KvCacheEvent& e : kv.take_events()) {
      switch (e.kind) {
        case KvCacheEvent::Kind::kBlockStored:
          ASSERT_FALSE(e.block_hashes.empty());
          ASSERT_EQ(e.token_ids.size(), e.block_hashes.size() * bs);
          if (e.parent_block_hash.has_value()) {
            ASSERT_TRUE(router.count(*e.parent_block_hash)) << "unknown parent";
          }
          for (uint64_t h : e.block_hashes) ASSERT_TRUE(router.insert(h).second) << "stored twice";
          stored += static_cast<int64_t>(e.block_hashes.size());
          break;
        case KvCacheEvent::Kind::kBlockRemoved:
          for (uint64_t h : e.block_hashes) ASSERT_EQ(router.erase(h), 1u) << "unknown removal";
          removed += static_cast<int64_t>(e.block_hashes.size());
          break;
        case KvCacheEvent::Kind::kAllBlocksCleared:
          router.clear();
          break;
      }
    }
    const std::vector<uint64_t> own = kv.radix_cache().block_hashes();
    ASSERT_EQ(router, std::set<uint64_t>(own.begin(), own.end()));
  };
  std::vector<std::vector<TokenId>> documents;
  for (int d = 0; d < 5; ++d) {
    std::vector<TokenId> t(18);
    for (auto& x : t) x = static_cast<TokenId>(rng() % 4);
    documents.push_back(t);
  }
  std::vector<SeqId> live;
  for (int step = 0; step < 1500; ++step) {
    if (rng() % 3 != 0 || live.empty()) {
      const auto& doc = documents[rng() % documents.size()];
      std::vector<TokenId> p(doc.begin(), doc.begin() + 2 + static_cast<long>(rng() % (doc.size() - 2)));
      const std::string ns = rng() % 3 == 0 ? "m|salt" : "m";
      const PrefixMatch m = kv.match(ns, p);
      const SeqId id = step;
      kv.start_sequence(id, ns, m);
      if (kv.allocate_slots(id, static_cast<int64_t>(p.size()))) {
        kv.commit(id, p, static_cast<int64_t>(p.size()));
        live.push_back(id);
      } else {
        kv.free(id);
      }
    } else {
      const size_t i = rng() % live.size();
      kv.free(live[i]);
      live.erase(live.begin() + static_cast<long>(i));
    }
    follow();
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(stored, 100);
  EXPECT_GT(removed, 20);

  ASSERT_FALSE(live.empty());
  EXPECT_FALSE(kv.reset_prefix_cache());  // refused while sequences hold cached blocks
  EXPECT_TRUE(kv.take_events().empty());
  for (SeqId id : live) kv.free(id);
  follow();
  ASSERT_TRUE(kv.reset_prefix_cache());
  const std::vector<KvCacheEvent> cleared = kv.take_events();
  ASSERT_EQ(cleared.size(), 1u);
  EXPECT_EQ(cleared[0].kind, KvCacheEvent::Kind::kAllBlocksCleared);
  EXPECT_TRUE(kv.radix_cache().block_hashes().empty());
  EXPECT_EQ(kv.stats().blocks_free, 30);
  kv.check_invariants();
  // Namespaces never share a hash: the same tokens under two namespaces are two blocks.
  const std::vector<TokenId> p = Range(1, 7);
  Admit(kv, 9000, "a", p);
  Admit(kv, 9001, "b", p);
  std::vector<uint64_t> a, b;
  for (const KvCacheEvent& e : kv.take_events()) {
    (a.empty() ? a : b) = e.block_hashes;
    EXPECT_FALSE(e.parent_block_hash.has_value());  // one event per prompt: its first block first
  }
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_NE(a[0], b[0]);
  EXPECT_NE(a[1], b[1]);
}

}  // namespace
}  // namespace kvserve

namespace kvserve {
namespace {

// KV tiers: blocks loaded from disk or Redis enter the prefix cache as cached blocks that a
// later match finds, filled before they are visible; the prefix they extend is never evicted.
TEST(KvCacheManagerImportTest, ImportedBlocksAreMatchedAndEvictable) {
  KvCacheManager kv({.num_blocks = 6, .block_size = 4, .record_stored_blocks = true});
  const auto prompt = Range(1, 17);  // 4 full blocks + 1
  std::vector<std::pair<BlockId, int64_t>> filled;
  auto fill = [&](BlockId b, int64_t i) { filled.push_back({b, i}); };
  // Blocks 0..3 from the tier into an empty cache.
  EXPECT_EQ(kv.import_blocks("m", prompt, 0, 4, fill), 4);
  kv.check_invariants();
  ASSERT_EQ(filled.size(), 4u);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(filled[static_cast<size_t>(i)].second, i);
  const std::vector<StoredKvBlock> stored = kv.take_stored_blocks();
  ASSERT_EQ(stored.size(), 4u);
  EXPECT_EQ(stored[0].parent_key, 0u);
  EXPECT_EQ(stored[1].parent_key, stored[0].key);
  EXPECT_EQ(stored[3].tokens, Range(13, 16));
  PrefixMatch m = kv.match("m", prompt);
  EXPECT_EQ(m.num_cached_tokens, 16);
  EXPECT_EQ(kv.stats().blocks_cached, 4);
  // Importing what is there already fills nothing.
  filled.clear();
  EXPECT_EQ(kv.import_blocks("m", prompt, 0, 4, fill), 0);
  EXPECT_TRUE(filled.empty());
  // Another namespace: its prefix before block 2 is not cached, so nothing can attach.
  EXPECT_EQ(kv.import_blocks("other", prompt, 2, 2, fill), 0);
  // A sequence using the imported prefix holds it like any cached prefix.
  m = Admit(kv, 1, "m", prompt);
  EXPECT_EQ(m.num_cached_tokens, 16);
  Free(kv, 1);
}

// A block imported and then evicted (its id reused by a sequence, which overwrites its KV)
// before the engine takes the stored blocks must not be offered under its old key.
TEST(KvCacheManagerImportTest, EvictedBlocksAreNotOfferedUnderTheirOldKey) {
  KvCacheManager kv({.num_blocks = 4, .block_size = 4, .record_stored_blocks = true});
  EXPECT_EQ(kv.import_blocks("m", Range(1, 17), 0, 4, [](BlockId, int64_t) {}), 4);
  Admit(kv, 1, "m", Range(100, 111));  // 3 blocks: evicts 3 of the 4 imported ones
  const std::vector<StoredKvBlock> stored = kv.take_stored_blocks();
  // The one imported block still cached, and the sequence's own committed blocks.
  int64_t imported_left = 0;
  for (const StoredKvBlock& b : stored) imported_left += b.tokens.front() < 100;
  EXPECT_EQ(imported_left, 1);
  EXPECT_EQ(static_cast<int64_t>(stored.size()), 1 + 3);
  Free(kv, 1);
}

TEST(KvCacheManagerImportTest, ImportsWhatThePoolCanHoldWithoutEvictingItsOwnPrefix) {
  KvCacheManager kv({.num_blocks = 4, .block_size = 4});
  const auto prompt = Range(1, 25);  // 6 full blocks + 1
  // Blocks 0 and 1 computed by a request, then released (cached).
  Admit(kv, 1, "m", Range(1, 9));
  Free(kv, 1);
  ASSERT_EQ(kv.match("m", prompt).num_cached_tokens, 8);
  // Blocks 2..5 loaded: only 4 - 2 = 2 fit beside the prefix they extend, which stays.
  int64_t fills = 0;
  EXPECT_EQ(kv.import_blocks("m", prompt, 2, 4, [&](BlockId, int64_t) { ++fills; }), 2);
  EXPECT_EQ(fills, 2);
  kv.check_invariants();
  EXPECT_EQ(kv.match("m", prompt).num_cached_tokens, 16);
  // While a sequence holds every block, nothing can be imported.
  Admit(kv, 2, "m", Range(100, 115));  // 4 blocks: evicts the whole cached prefix
  EXPECT_EQ(kv.import_blocks("x", Range(200, 208), 0, 2, [&](BlockId, int64_t) { ++fills; }), 0);
  EXPECT_EQ(fills, 2);
  Free(kv, 2);
}

}  // namespace
}  // namespace kvserve

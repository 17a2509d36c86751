#include "kv/radix_cache.h"

#include <algorithm>
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
using NodeId = RadixCache::NodeId;
constexpr NodeId kNoNode = RadixCache::kNoNode;

// Inserts the full blocks of `tokens` under `ns` along the existing path, giving new nodes
// the blocks `blocks[j]`; returns the path. Checks invariants after every insert.
std::vector<NodeId> InsertPath(RadixCache& tree, const std::string& ns,
                               const std::vector<TokenId>& tokens,
                               const std::vector<BlockId>& blocks) {
  const size_t bs = static_cast<size_t>(tree.block_size());
  std::vector<NodeId> path;
  NodeId parent = kNoNode;
  for (size_t j = 0; j < tokens.size() / bs; ++j) {
    const auto r =
        tree.insert(ns, parent, std::span<const TokenId>(tokens).subspan(j * bs, bs), blocks[j]);
    EXPECT_NE(r.node, kNoNode);
    path.push_back(r.node);
    parent = r.node;
    tree.check_invariants();
  }
  return path;
}

std::vector<BlockId> Blocks(const RadixCache& tree, const std::vector<NodeId>& nodes) {
  std::vector<BlockId> out;
  for (NodeId n : nodes) out.push_back(tree.block(n));
  return out;
}

RadixCache::Match MatchAll(const RadixCache& tree, const std::string& ns,
                           const std::vector<TokenId>& tokens) {
  return tree.match(ns, tokens, static_cast<int64_t>(tokens.size()) / tree.block_size());
}

TEST(RadixCacheTest, MatchesWholeBlocksOnly) {
  RadixCache tree({.block_size = 2});
  InsertPath(tree, "m", {1, 2, 3, 4, 5, 6}, {10, 11, 12});
  EXPECT_EQ(tree.num_nodes(), 3);
  EXPECT_EQ(tree.num_evictable(), 3);
  // Shares the first two blocks, differs inside the third.
  EXPECT_THAT(Blocks(tree, MatchAll(tree, "m", {1, 2, 3, 4, 5, 7}).nodes), ElementsAre(10, 11));
  // Differs inside the first block: nothing, although tokens 3.. agree.
  EXPECT_TRUE(MatchAll(tree, "m", {1, 9, 3, 4}).nodes.empty());
  // Only num_blocks blocks are looked at.
  EXPECT_THAT(Blocks(tree, tree.match("m", std::vector<TokenId>{1, 2, 3, 4, 5, 6}, 1).nodes),
              ElementsAre(10));
  // Another namespace sees nothing.
  EXPECT_TRUE(MatchAll(tree, "other", {1, 2, 3, 4}).nodes.empty());
  tree.check_invariants();
}

TEST(RadixCacheTest, InsertReturnsTheExistingNodeForKnownTokens) {
  RadixCache tree({.block_size = 2});
  const auto path = InsertPath(tree, "m", {1, 2, 3, 4}, {0, 1});
  const auto r = tree.insert("m", path[0], std::vector<TokenId>{3, 4}, 7);
  EXPECT_FALSE(r.inserted);
  EXPECT_EQ(r.node, path[1]);
  EXPECT_EQ(tree.block(r.node), 1);  // the tree keeps its block; 7 stays the caller's
  EXPECT_EQ(tree.node_of_block(7), kNoNode);
  // A sibling branch.
  const auto s = tree.insert("m", path[0], std::vector<TokenId>{3, 5}, 7);
  EXPECT_TRUE(s.inserted);
  EXPECT_EQ(tree.parent(s.node), path[0]);
  EXPECT_EQ(tree.parent(path[0]), kNoNode);
  EXPECT_EQ(tree.children("m", path[0]), (std::vector<NodeId>{path[1], s.node}));
  EXPECT_EQ(tree.children("m", kNoNode), (std::vector<NodeId>{path[0]}));
  EXPECT_EQ(tree.namespace_of(s.node), "m");
  tree.check_invariants();
}

// Exact eviction order: least recently used unlocked leaves, parents after their children.
TEST(RadixCacheTest, EvictsLeastRecentlyUsedLeavesFirst) {
  RadixCache tree({.block_size = 1});
  // a: 1 2 3   (blocks 0 1 2)
  // b: 1 4     (block 3 under block 0)
  // c: 5       (block 4)
  InsertPath(tree, "m", {1, 2, 3}, {0, 1, 2});
  const NodeId n0 = tree.node_of_block(0);
  const auto r = tree.insert("m", n0, std::vector<TokenId>{4}, 3);
  ASSERT_TRUE(r.inserted);
  InsertPath(tree, "m", {5}, {4});
  tree.check_invariants();
  // Leaves by last use: 2 (oldest), 3, 4. Evicting 2 leaves block 1 a leaf with an older use
  // than 3 and 4, so it goes next; then 3; then 0 (a leaf once 3 is gone, older than 4).
  EXPECT_THAT(tree.evict(1), ElementsAre(2));
  tree.check_invariants();
  EXPECT_THAT(tree.evict(2), ElementsAre(1, 3));
  tree.check_invariants();
  EXPECT_THAT(tree.evict(10), ElementsAre(0, 4));
  EXPECT_EQ(tree.num_nodes(), 0);
  EXPECT_EQ(tree.num_namespaces(), 0);  // the empty namespace root is dropped
  EXPECT_EQ(tree.num_evicted(), 5);
  tree.check_invariants();
}

TEST(RadixCacheTest, LockedPathsAreNeverEvictedAndUnlockRefreshesUse) {
  RadixCache tree({.block_size = 1});
  const auto a = InsertPath(tree, "m", {1, 2}, {0, 1});
  const auto b = InsertPath(tree, "m", {3, 4}, {2, 3});
  // Lock path a (root first), as a running sequence does.
  tree.lock(a[0]);
  tree.lock(a[1]);
  EXPECT_EQ(tree.num_locked(), 2);
  EXPECT_EQ(tree.num_evictable(), 2);
  EXPECT_THAT(tree.evict(5), ElementsAre(3, 2));  // only b; a is protected
  tree.check_invariants();
  // Unlocking a leaf first makes block 1 older than block 0.
  tree.unlock(a[1]);
  tree.unlock(a[0]);
  InsertPath(tree, "m", {5}, {4});  // newer than a
  EXPECT_THAT(tree.evict(1), ElementsAre(1));
  EXPECT_THAT(tree.evict(1), ElementsAre(0));
  EXPECT_THAT(tree.evict(1), ElementsAre(4));
  tree.check_invariants();
}

TEST(RadixCacheTest, LockingRequiresTheParentPath) {
  RadixCache tree({.block_size = 1});
  const auto a = InsertPath(tree, "m", {1, 2}, {0, 1});
  EXPECT_DEATH(tree.lock(a[1]), "not locked for it");
  tree.lock(a[0]);
  tree.lock(a[1]);
  EXPECT_DEATH(tree.unlock(a[0]), "children hold");
  // A second user of the first block only.
  tree.lock(a[0]);
  EXPECT_EQ(tree.lock_count(a[0]), 2);
  tree.unlock(a[0]);
  tree.unlock(a[1]);
  tree.unlock(a[0]);
  tree.check_invariants();
}

TEST(RadixCacheTest, NamespacesNeverShare) {
  RadixCache tree({.block_size = 2});
  InsertPath(tree, "model|salt-a", {1, 2, 3, 4}, {0, 1});
  InsertPath(tree, "model|salt-b", {1, 2, 3, 4}, {2, 3});
  EXPECT_EQ(tree.num_namespaces(), 2);
  EXPECT_THAT(Blocks(tree, MatchAll(tree, "model|salt-a", {1, 2, 3, 4}).nodes), ElementsAre(0, 1));
  EXPECT_THAT(Blocks(tree, MatchAll(tree, "model|salt-b", {1, 2, 3, 4}).nodes), ElementsAre(2, 3));
  tree.check_invariants();
}

TEST(RadixCacheTest, MissReasons) {
  RadixCache tree({.block_size = 2});
  InsertPath(tree, "a", {1, 2, 3, 4}, {0, 1});
  using R = PrefixMissReason;
  // Never seen anywhere.
  EXPECT_THAT(MatchAll(tree, "a", {9, 9, 8, 8}).misses, ElementsAre(R::kNeverSeen, R::kNeverSeen));
  // Cached only in namespace a.
  EXPECT_THAT(MatchAll(tree, "b", {1, 2, 3, 4, 5, 6}).misses,
              ElementsAre(R::kOtherNamespace, R::kOtherNamespace, R::kNeverSeen));
  // Evicted from a: block 1 (1 2 | 3 4) goes first.
  EXPECT_THAT(tree.evict(1), ElementsAre(1));
  auto m = MatchAll(tree, "a", {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(m.nodes.size(), 1u);
  EXPECT_THAT(m.misses, ElementsAre(R::kEvicted, R::kNeverSeen));
  // Evicted from a is "other namespace" for b (it was computed there).
  EXPECT_THAT(MatchAll(tree, "b", {1, 2, 3, 4}).misses,
              ElementsAre(R::kOtherNamespace, R::kOtherNamespace));
  // Re-inserted: a hit again.
  InsertPath(tree, "a", {1, 2, 3, 4}, {0, 5});
  EXPECT_THAT(Blocks(tree, MatchAll(tree, "a", {1, 2, 3, 4}).nodes), ElementsAre(0, 5));
  tree.check_invariants();
}

TEST(RadixCacheTest, EvictionHistoryIsBounded) {
  RadixCache tree({.block_size = 1, .eviction_history_size = 2});
  InsertPath(tree, "a", {1}, {0});
  InsertPath(tree, "a", {2}, {1});
  InsertPath(tree, "a", {3}, {2});
  EXPECT_THAT(tree.evict(3), ElementsAre(0, 1, 2));
  using R = PrefixMissReason;
  // Only the last two evictions are remembered.
  EXPECT_THAT(MatchAll(tree, "a", {1}).misses, ElementsAre(R::kNeverSeen));
  EXPECT_THAT(MatchAll(tree, "a", {2}).misses, ElementsAre(R::kEvicted));
  EXPECT_THAT(MatchAll(tree, "a", {3}).misses, ElementsAre(R::kEvicted));
  tree.check_invariants();
}

TEST(RadixCacheTest, HashDependsOnEveryToken) {
  std::vector<TokenId> t(37);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<TokenId>(i * 7 + 1);
  const uint64_t h = HashBlockTokens(t);
  std::set<uint64_t> seen = {h};
  for (size_t i = 0; i < t.size(); ++i) {
    auto u = t;
    u[i] ^= 1;
    seen.insert(HashBlockTokens(u));
  }
  EXPECT_EQ(seen.size(), t.size() + 1);
  EXPECT_NE(HashBlockTokens(std::vector<TokenId>{0}), HashBlockTokens(std::vector<TokenId>{0, 0}));
}

// Property test against a brute-force model: the set of cached prefixes (namespace + tokens)
// with their blocks, lock counts and last-use ticks. match() must return the longest cached
// prefix; evict() must return exactly the model's least recently used unlocked leaves.
TEST(RadixCacheTest, RandomOperationsMatchBruteForce) {
  for (int block_size : {1, 2, 3}) {
    std::mt19937 rng(1234 + block_size);
    RadixCache tree({.block_size = block_size});
    struct Entry {
      BlockId block;
      int locks = 0;
      uint64_t last_use = 0;
    };
    using Key = std::pair<std::string, std::vector<TokenId>>;  // namespace, prefix tokens
    std::map<Key, Entry> model;
    uint64_t clock = 0;
    BlockId next_block = 0;
    std::vector<std::pair<std::string, std::vector<NodeId>>> locked_paths;  // live "sequences"
    const std::vector<std::string> namespaces = {"m", "m|salt"};

    auto random_tokens = [&]() {
      std::vector<TokenId> t(static_cast<size_t>(rng() % (6 * block_size + 1)));
      for (auto& x : t) x = static_cast<TokenId>(rng() % 3);
      return t;
    };
    auto prefix_key = [&](const std::string& ns, const std::vector<TokenId>& t, size_t nb) {
      return Key{ns,
                 std::vector<TokenId>(t.begin(), t.begin() + static_cast<long>(nb) * block_size)};
    };
    std::map<Key, int> num_children;  // model: cached one-block extensions of each prefix
    auto parent_key = [&](const Key& k) {
      return Key{k.first, std::vector<TokenId>(k.second.begin(), k.second.end() - block_size)};
    };
    auto is_leaf = [&](const Key& k) { return num_children[k] == 0; };

    for (int step = 0; step < 3000; ++step) {
      const std::string& ns = namespaces[rng() % namespaces.size()];
      const int op = static_cast<int>(rng() % 10);
      if (op < 4) {
        // Match (against brute force), then insert the rest, as a committing sequence does;
        // maybe keep the path locked.
        const std::vector<TokenId> t = random_tokens();
        const size_t nb = t.size() / block_size;
        const auto m = tree.match(ns, t, static_cast<int64_t>(nb));
        size_t expect = 0;
        while (expect < nb && model.count(prefix_key(ns, t, expect + 1))) ++expect;
        ASSERT_EQ(m.nodes.size(), expect);
        ASSERT_EQ(m.nodes.size() + m.misses.size(), nb);
        for (size_t j = 0; j < expect; ++j) {
          ASSERT_EQ(tree.block(m.nodes[j]), model.at(prefix_key(ns, t, j + 1)).block);
        }
        const bool lock = rng() % 2;
        std::vector<NodeId> path;
        NodeId parent = kNoNode;
        for (size_t j = 0; j < nb; ++j) {
          const auto r = tree.insert(
              ns, parent, std::span<const TokenId>(t).subspan(j * block_size, block_size),
              next_block);
          ASSERT_NE(r.node, kNoNode);
          Entry& e = model[prefix_key(ns, t, j + 1)];
          ASSERT_EQ(r.inserted, j >= expect);
          if (r.inserted) {
            e.block = next_block++;
            e.last_use = ++clock;
            if (j > 0) ++num_children[parent_key(prefix_key(ns, t, j + 1))];
          }
          if (lock) {
            tree.lock(r.node);
            ++e.locks;
            e.last_use = ++clock;
            path.push_back(r.node);
          }
          parent = r.node;
        }
        if (lock) locked_paths.push_back({ns, path});
      } else if (op < 7 && !locked_paths.empty()) {
        // A sequence ends: unlock its path leaf first.
        const size_t i = rng() % locked_paths.size();
        const auto [pns, path] = locked_paths[i];
        locked_paths.erase(locked_paths.begin() + static_cast<long>(i));
        for (auto it = path.rbegin(); it != path.rend(); ++it) {
          std::vector<TokenId> prefix;
          for (NodeId n = *it; n != kNoNode; n = tree.parent(n)) {
            prefix.insert(prefix.begin(), tree.tokens(n).begin(), tree.tokens(n).end());
          }
          Entry& e = model.at(Key{pns, prefix});
          tree.unlock(*it);
          --e.locks;
          e.last_use = ++clock;
        }
      } else {
        // Evict a few: the model's least recently used unlocked leaves, one at a time.
        const int64_t n = static_cast<int64_t>(rng() % 4);
        const std::vector<BlockId> got = tree.evict(n);
        std::vector<BlockId> expect;
        for (int64_t i = 0; i < n; ++i) {
          const Key* best = nullptr;
          for (const auto& [k, e] : model) {
            if (e.locks == 0 && is_leaf(k) &&
                (best == nullptr || e.last_use < model.at(*best).last_use)) {
              best = &k;
            }
          }
          if (best == nullptr) break;
          expect.push_back(model.at(*best).block);
          if (best->second.size() > static_cast<size_t>(block_size))
            --num_children[parent_key(*best)];
          num_children.erase(*best);
          model.erase(*best);
        }
        ASSERT_EQ(got, expect) << "step " << step;
      }
      tree.check_invariants();
      ASSERT_EQ(tree.num_nodes(), static_cast<int64_t>(model.size()));
    }
    // Unlock everything; then the whole tree can be evicted.
    for (const auto& [pns, path] : locked_paths) {
      for (auto it = path.rbegin(); it != path.rend(); ++it) tree.unlock(*it);
    }
    EXPECT_EQ(tree.num_locked(), 0);
    EXPECT_EQ(static_cast<int64_t>(tree.evict(1 << 20).size()), static_cast<int64_t>(model.size()));
    EXPECT_EQ(tree.num_nodes(), 0);
    tree.check_invariants();
  }
}

}  // namespace
}  // namespace kvserve

// SemanticCache: exact repeats, semantic hits over an HNSW index per scope, lexical vetoes,
// LRU and TTL, slot reuse, and the invariants under a random workload. The embedding here is a
// test-side bag of hashed words (close texts share most words); the server's comes from an
// embedding model.
#include "semcache/semantic_cache.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/hash.h"

namespace kvserve::semcache {
namespace {

constexpr int32_t kDim = 64;

// Each lower-cased word adds a +-1 at two hashed positions.
std::vector<float> Embed(const std::string& text) {
  std::vector<float> v(kDim, 0.0f);
  std::string word;
  auto flush = [&] {
    if (word.empty()) return;
    uint64_t h = 0;
    for (char c : word) h = HashCombine(h, static_cast<uint64_t>(static_cast<unsigned char>(std::tolower(c))));
    v[h % kDim] += (h >> 32) & 1 ? 1.0f : -1.0f;
    v[(h >> 8) % kDim] += (h >> 40) & 1 ? 1.0f : -1.0f;
    word.clear();
  };
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      word += c;
    } else {
      flush();
    }
  }
  flush();
  return v;
}

CachedResponse Response(const std::string& id) { return CachedResponse{id, "{\"text\": \"" + id + "\"}", 3, 0.5}; }

SemanticCacheOptions Options(int64_t max_entries = 100, int32_t dim = kDim) {
  SemanticCacheOptions o;
  o.max_entries = max_entries;
  o.dim = dim;
  return o;
}

TEST(SemanticCacheTest, ExactRepeatsHitInTheirScopeOnly) {
  SemanticCache cache(Options(100, /*dim=*/0));  // exact mode: no embeddings
  const Hash128 a = HashText("tenant a"), b = HashText("tenant b");
  ASSERT_TRUE(cache.Insert(a, "user: What is the refund window?", {}, Response("r1")).ok());
  LookupResult hit = cache.Lookup(a, "user:  What is the refund\nwindow? ", {}, 0.96f);
  EXPECT_EQ(hit.kind, HitKind::kExact);
  ASSERT_NE(hit.response, nullptr);
  EXPECT_EQ(hit.response->id, "r1");
  EXPECT_EQ(hit.similarity, 1.0f);
  EXPECT_EQ(cache.Lookup(b, "user: What is the refund window?", {}, 0.96f).kind, HitKind::kMiss);
  EXPECT_EQ(cache.Lookup(a, "user: what is the refund window?", {}, 0.96f).kind, HitKind::kMiss);
  // Replacing: the same key stores the newer response.
  ASSERT_TRUE(cache.Insert(a, "user: What is the refund window?", {}, Response("r2")).ok());
  EXPECT_EQ(cache.Lookup(a, "user: What is the refund window?", {}, 0.96f).response->id, "r2");
  EXPECT_EQ(cache.stats().entries, 1);
  cache.check_invariants();
}

TEST(SemanticCacheTest, SemanticHitsAboveTheThresholdUnlessVetoed) {
  SemanticCache cache(Options());
  const Hash128 scope = HashText("scope");
  const std::string stored = "user: what is the refund window for EU orders of shoes and bags";
  ASSERT_TRUE(cache.Insert(scope, stored, Embed(stored), Response("eu")).ok());
  // A paraphrase sharing most words: similar, not an exact repeat.
  const std::string close = "user: what is the refund window for EU orders of shoes and bags please";
  LookupResult r = cache.Lookup(scope, close, Embed(close), 0.8f);
  ASSERT_EQ(r.kind, HitKind::kSemantic) << r.similarity;
  EXPECT_EQ(r.response->id, "eu");
  EXPECT_GE(r.similarity, 0.8f);
  EXPECT_LT(r.similarity, 1.0f);
  // The same paraphrase under a threshold above its similarity: a near miss, similarity said.
  LookupResult strict = cache.Lookup(scope, close, Embed(close), 0.999f);
  EXPECT_EQ(strict.kind, HitKind::kMiss);
  EXPECT_FLOAT_EQ(strict.similarity, r.similarity);
  // One word apart, but the word is a name: vetoed.
  const std::string us = "user: what is the refund window for US orders of shoes and bags";
  LookupResult vetoed = cache.Lookup(scope, us, Embed(us), 0.8f);
  EXPECT_EQ(vetoed.kind, HitKind::kMiss);
  EXPECT_GE(vetoed.similarity, 0.8f);
  EXPECT_NE(vetoed.veto_reason.find("names differ"), std::string::npos) << vetoed.veto_reason;
  // Another scope never sees it.
  EXPECT_EQ(cache.Lookup(HashText("other"), close, Embed(close), 0.0f).kind, HitKind::kMiss);
  // Wrong sizes: refused on insert, exact-only on lookup.
  EXPECT_FALSE(cache.Insert(scope, "x", std::vector<float>(3, 1.0f), Response("bad")).ok());
  EXPECT_EQ(cache.Lookup(scope, close, std::vector<float>(3, 1.0f), 0.0f).kind, HitKind::kMiss);
  cache.check_invariants();
}

TEST(SemanticCacheTest, LruBoundsEntriesAndReusesIndexSlots) {
  SemanticCache cache(Options(/*max_entries=*/10));
  const Hash128 scope = HashText("s");
  for (int i = 0; i < 100; ++i) {
    const std::string text = "question number " + std::to_string(i) + " about topic " + std::to_string(i % 7);
    ASSERT_TRUE(cache.Insert(scope, text, Embed(text), Response(std::to_string(i))).ok());
    cache.check_invariants();
  }
  const SemanticCacheStats st = cache.stats();
  EXPECT_EQ(st.entries, 10);
  EXPECT_EQ(st.evictions, 90);
  // The newest ten are there, the oldest gone.
  EXPECT_EQ(cache.Lookup(scope, "question number 99 about topic 1", {}, 1.0f).kind, HitKind::kExact);
  EXPECT_EQ(cache.Lookup(scope, "question number 0 about topic 0", {}, 1.0f).kind, HitKind::kMiss);
  // A lookup makes an entry recent: it survives the next insert, the least recent does not.
  EXPECT_EQ(cache.Lookup(scope, "question number 90 about topic 6", {}, 1.0f).kind, HitKind::kExact);
  ASSERT_TRUE(cache.Insert(scope, "one more", Embed("one more"), Response("x")).ok());
  EXPECT_EQ(cache.Lookup(scope, "question number 90 about topic 6", {}, 1.0f).kind, HitKind::kExact);
  EXPECT_EQ(cache.Lookup(scope, "question number 91 about topic 0", {}, 1.0f).kind, HitKind::kMiss);
}

TEST(SemanticCacheTest, EntriesExpireAfterTheTtl) {
  SemanticCacheOptions o = Options();
  o.ttl_seconds = 0.05;
  SemanticCache cache(o);
  const Hash128 scope = HashText("s");
  ASSERT_TRUE(cache.Insert(scope, "hello there", Embed("hello there"), Response("a")).ok());
  EXPECT_EQ(cache.Lookup(scope, "hello there", {}, 1.0f).kind, HitKind::kExact);
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  EXPECT_EQ(cache.Lookup(scope, "hello there", Embed("hello there"), 0.5f).kind, HitKind::kMiss);
  EXPECT_EQ(cache.stats().entries, 0);
  EXPECT_EQ(cache.stats().expirations, 1);
  cache.check_invariants();
}

TEST(SemanticCacheTest, RandomWorkloadKeepsInvariantsAndFindsWhatItHolds) {
  SemanticCache cache(Options(/*max_entries=*/200));
  std::mt19937_64 rng(7);
  std::vector<Hash128> scopes;
  for (int s = 0; s < 5; ++s) scopes.push_back(HashText("scope " + std::to_string(s)));
  int exact_hits = 0;
  for (int op = 0; op < 4000; ++op) {
    const Hash128& scope = scopes[rng() % scopes.size()];
    const std::string text = "item " + std::to_string(rng() % 400) + " colour " + std::to_string(rng() % 3);
    if (rng() % 2 == 0) {
      ASSERT_TRUE(cache.Insert(scope, text, rng() % 4 == 0 ? std::vector<float>() : Embed(text),
                               Response(text)).ok());
    } else {
      LookupResult r = cache.Lookup(scope, text, Embed(text), 0.9f);
      if (r.kind != HitKind::kMiss) {
        ASSERT_NE(r.response, nullptr);
        // Every hit passed the vetoes: same numbers, so the same item and colour.
        EXPECT_EQ(r.response->id, text);
      }
      exact_hits += r.kind == HitKind::kExact;
    }
    if (op % 100 == 0) cache.check_invariants();
  }
  EXPECT_GT(exact_hits, 0);
  EXPECT_EQ(cache.stats().entries, 200);
  cache.check_invariants();
}

}  // namespace
}  // namespace kvserve::semcache

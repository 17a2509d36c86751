// SemanticCache: tier 1 of kvserve's cache (semantic response cache -> radix prefix cache ->
// paged, quantized KV). A finished response is stored under its scope (everything that must
// be identical for the answer to be reusable: model, tenant, system prompt, tools,
// response_format, sampling settings; hashed exactly by the caller) and its key text (the
// conversation after the system prompt, all turns). A later request in the same scope gets it
// back when its key text is an exact repeat (after NormalizeForExactMatch; no embedding
// needed), or, in semantic mode, when its embedding's cosine similarity to the entry's is at
// least the threshold and no lexical veto (VetoReason) objects.
//
// Index: one hnswlib HNSW graph per scope (inner product over L2-normalised vectors, so
// similarity = 1 - distance), so a search never sees another tenant's entries; slots of
// evicted entries are reused. Entries: LRU over all scopes, bounded by max_entries, with an
// optional TTL. Thread-safe: one mutex (lookups and inserts are tens of microseconds, see
// docs/semantic-cache.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace kvserve::semcache {

// 128-bit hash (XXH3) of a scope's canonical text or of a key text.
struct Hash128 {
  uint64_t lo = 0, hi = 0;
  bool operator==(const Hash128& o) const { return lo == o.lo && hi == o.hi; }
};
Hash128 HashText(std::string_view text);
struct Hash128Hasher {
  size_t operator()(const Hash128& h) const { return static_cast<size_t>(h.lo ^ (h.hi * 31)); }
};

// What a hit returns: the stored response, opaque to the cache (the server stores its JSON).
struct CachedResponse {
  std::string id;           // the original response's id
  std::string payload;      // e.g. the response's choices and usage as JSON
  int64_t num_output_tokens = 0;
  double generation_seconds = 0.0;  // what computing it took (metrics: time saved)
};

struct SemanticCacheOptions {
  int64_t max_entries = 10000;  // LRU bound over all scopes
  double ttl_seconds = 0.0;     // 0: entries never expire
  int32_t dim = 0;              // embedding size; 0: exact repeats only
  // HNSW: graph degree, build and search breadth, candidates checked per lookup (a vetoed or
  // expired candidate moves on to the next).
  int32_t hnsw_m = 16;
  int32_t hnsw_ef_construction = 100;
  int32_t hnsw_ef_search = 64;
  int32_t num_candidates = 8;
};

enum class HitKind { kMiss, kExact, kSemantic };
const char* HitKindName(HitKind kind);  // "miss", "exact", "semantic"

struct LookupResult {
  HitKind kind = HitKind::kMiss;
  std::shared_ptr<const CachedResponse> response;  // set on a hit
  // Semantic lookups: the similarity of the hit, or of the closest candidate in the scope on a
  // miss (-1 when the scope holds no entry); 1 for exact hits.
  float similarity = -1.0f;
  // A candidate at or above the threshold that a lexical rule refused (the first one's reason).
  std::string veto_reason;
};

struct SemanticCacheStats {
  int64_t entries = 0;
  int64_t scopes = 0;
  int64_t bytes = 0;  // texts, payloads, embeddings and index slots, estimated
  int64_t evictions = 0;  // LRU
  int64_t expirations = 0;  // TTL
};

class SemanticCache {
 public:
  explicit SemanticCache(const SemanticCacheOptions& options);
  ~SemanticCache();
  SemanticCache(const SemanticCache&) = delete;
  SemanticCache& operator=(const SemanticCache&) = delete;

  const SemanticCacheOptions& options() const { return options_; }

  // `embedding`: empty for an exact-only lookup; else options().dim values (normalised here).
  // `threshold`: the least cosine similarity of a semantic hit.
  LookupResult Lookup(const Hash128& scope, std::string_view key_text,
                      const std::vector<float>& embedding, float threshold);

  // Stores `response` (replacing an entry with the same scope and key text). `embedding`:
  // empty (found by exact repeats only) or options().dim values. InvalidArgument for an
  // embedding of another size.
  Status Insert(const Hash128& scope, std::string_view key_text, std::vector<float> embedding,
                CachedResponse response);

  SemanticCacheStats stats() const;
  void check_invariants() const;

 private:
  struct Entry;
  struct ScopeIndex;
  using Clock = std::chrono::steady_clock;

  bool expired(const Entry& e, Clock::time_point now) const;
  // Removes an entry from its scope's maps and index, the LRU and the byte count.
  void erase(std::list<Entry>::iterator it);
  void touch(std::list<Entry>::iterator it);
  ScopeIndex& scope_index(const Hash128& scope);

  SemanticCacheOptions options_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // front: most recently used
  std::unordered_map<Hash128, std::unique_ptr<ScopeIndex>, Hash128Hasher> scopes_;
  int64_t bytes_ = 0;
  SemanticCacheStats counters_;
};

}  // namespace kvserve::semcache

#include "semcache/semantic_cache.h"

#include <hnswlib/hnswlib.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "base/check.h"
#include "kernels/kernels.h"
#include "semcache/text_match.h"

namespace kvserve::semcache {

namespace {

// hnswlib's inner-product distance (1 - a.b) on the kernels' dot product, which picks AVX2 or
// AVX-512 at run time: hnswlib picks its SIMD at compile time, which in this portable build
// (no -march) means SSE. 384-value distances take about half the time.
class DotProductSpace : public hnswlib::SpaceInterface<float> {
 public:
  explicit DotProductSpace(size_t dim) : dim_(dim) {}
  size_t get_data_size() override { return dim_ * sizeof(float); }
  hnswlib::DISTFUNC<float> get_dist_func() override { return &Distance; }
  void* get_dist_func_param() override { return &dim_; }

 private:
  static float Distance(const void* a, const void* b, const void* dim) {
    return 1.0f - kernels::Dot(static_cast<const float*>(a), static_cast<const float*>(b),
                               static_cast<int64_t>(*static_cast<const size_t*>(dim)));
  }
  size_t dim_;
};

}  // namespace

Hash128 HashText(std::string_view text) {
  const XXH128_hash_t h = XXH3_128bits(text.data(), text.size());
  return Hash128{h.low64, h.high64};
}

const char* HitKindName(HitKind kind) {
  switch (kind) {
    case HitKind::kMiss: return "miss";
    case HitKind::kExact: return "exact";
    case HitKind::kSemantic: return "semantic";
  }
  return "";
}

namespace {

constexpr size_t kNoSlot = static_cast<size_t>(-1);
constexpr size_t kInitialSlots = 64;
constexpr int64_t kEntryOverheadBytes = 160;  // list node, map entries, shared_ptr block

void L2Normalize(std::vector<float>* v) {
  double sum = 0.0;
  for (float x : *v) sum += static_cast<double>(x) * x;
  if (sum <= 0.0) return;
  const auto inv = static_cast<float>(1.0 / std::sqrt(sum));
  for (float& x : *v) x *= inv;
}

}  // namespace

struct SemanticCache::Entry {
  Hash128 scope;
  Hash128 key_hash;
  std::string key_text;          // normalised
  std::vector<float> embedding;  // L2-normalised, or empty
  std::shared_ptr<const CachedResponse> response;
  Clock::time_point inserted;
  size_t slot = kNoSlot;  // its HNSW slot when embedded
  int64_t bytes = 0;
};

struct SemanticCache::ScopeIndex {
  std::unordered_map<Hash128, std::list<Entry>::iterator, Hash128Hasher> exact;
  // Created with the scope's first embedded entry.
  std::unique_ptr<DotProductSpace> space;
  std::unique_ptr<hnswlib::HierarchicalNSW<float>> hnsw;
  std::vector<std::list<Entry>::iterator> slot_entry;  // occupied slots -> their entry
  std::vector<size_t> free_slots;                      // marked deleted, reusable
  size_t num_slots = 0;                                // ever used (occupied + free)
  int64_t num_embedded = 0;
};

SemanticCache::SemanticCache(const SemanticCacheOptions& options) : options_(options) {
  KV_CHECK(options_.max_entries >= 1 && options_.dim >= 0 && options_.num_candidates >= 1);
}

SemanticCache::~SemanticCache() = default;

bool SemanticCache::expired(const Entry& e, Clock::time_point now) const {
  return options_.ttl_seconds > 0.0 &&
         std::chrono::duration<double>(now - e.inserted).count() > options_.ttl_seconds;
}

SemanticCache::ScopeIndex& SemanticCache::scope_index(const Hash128& scope) {
  std::unique_ptr<ScopeIndex>& s = scopes_[scope];
  if (s == nullptr) s = std::make_unique<ScopeIndex>();
  return *s;
}

void SemanticCache::touch(std::list<Entry>::iterator it) { lru_.splice(lru_.begin(), lru_, it); }

void SemanticCache::erase(std::list<Entry>::iterator it) {
  auto sit = scopes_.find(it->scope);
  KV_CHECK(sit != scopes_.end());
  ScopeIndex& s = *sit->second;
  s.exact.erase(it->key_hash);
  if (it->slot != kNoSlot) {
    s.hnsw->markDelete(it->slot);
    s.free_slots.push_back(it->slot);
    --s.num_embedded;
  }
  bytes_ -= it->bytes;
  lru_.erase(it);
  if (s.exact.empty()) scopes_.erase(sit);
}

LookupResult SemanticCache::Lookup(const Hash128& scope, std::string_view key_text,
                                   const std::vector<float>& embedding, float threshold) {
  LookupResult result;
  const std::string text = NormalizeForExactMatch(key_text);
  const Hash128 key = HashText(text);
  const Clock::time_point now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  auto sit = scopes_.find(scope);
  if (sit == scopes_.end()) return result;
  ScopeIndex* s = sit->second.get();
  if (auto e = s->exact.find(key); e != s->exact.end() && e->second->key_text == text) {
    if (expired(*e->second, now)) {
      ++counters_.expirations;
      erase(e->second);  // may drop the scope
      sit = scopes_.find(scope);
      if (sit == scopes_.end()) return result;
      s = sit->second.get();
    } else {
      touch(e->second);
      result.kind = HitKind::kExact;
      result.similarity = 1.0f;
      result.response = e->second->response;
      return result;
    }
  }
  if (embedding.empty() || static_cast<int32_t>(embedding.size()) != options_.dim ||
      s->hnsw == nullptr || s->num_embedded == 0) {
    return result;
  }
  std::vector<float> query = embedding;
  L2Normalize(&query);
  s->hnsw->setEf(static_cast<size_t>(std::max(options_.hnsw_ef_search, options_.num_candidates)));
  const size_t k = std::min<size_t>(static_cast<size_t>(options_.num_candidates),
                                    static_cast<size_t>(s->num_embedded));
  auto heap = s->hnsw->searchKnn(query.data(), k);
  std::vector<std::pair<float, size_t>> found;  // (distance, slot), nearest first
  while (!heap.empty()) {
    found.emplace_back(heap.top().first, static_cast<size_t>(heap.top().second));
    heap.pop();
  }
  std::sort(found.begin(), found.end());
  std::vector<std::list<Entry>::iterator> stale;
  for (const auto& [distance, slot] : found) {
    const float similarity = 1.0f - distance;
    result.similarity = std::max(result.similarity, similarity);
    if (similarity < threshold) break;
    auto it = s->slot_entry[slot];
    if (expired(*it, now)) {
      stale.push_back(it);
      continue;
    }
    std::string veto = VetoReason(text, it->key_text);
    if (!veto.empty()) {
      if (result.veto_reason.empty()) result.veto_reason = std::move(veto);
      continue;
    }
    result.kind = HitKind::kSemantic;
    result.similarity = similarity;
    result.response = it->response;
    touch(it);
    break;
  }
  for (auto it : stale) {
    ++counters_.expirations;
    erase(it);
  }
  return result;
}

Status SemanticCache::Insert(const Hash128& scope, std::string_view key_text,
                             std::vector<float> embedding, CachedResponse response) {
  if (!embedding.empty() && static_cast<int32_t>(embedding.size()) != options_.dim) {
    return InvalidArgumentError("semantic cache: an embedding of " +
                                std::to_string(embedding.size()) + " values, the cache takes " +
                                std::to_string(options_.dim));
  }
  std::string text = NormalizeForExactMatch(key_text);
  const Hash128 key = HashText(text);
  L2Normalize(&embedding);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto sit = scopes_.find(scope); sit != scopes_.end()) {
    if (auto e = sit->second->exact.find(key); e != sit->second->exact.end()) erase(e->second);
  }
  while (static_cast<int64_t>(lru_.size()) >= options_.max_entries) {
    ++counters_.evictions;
    erase(std::prev(lru_.end()));
  }
  ScopeIndex& s = scope_index(scope);
  lru_.push_front(Entry{});
  auto it = lru_.begin();
  it->scope = scope;
  it->key_hash = key;
  it->key_text = std::move(text);
  it->inserted = Clock::now();
  it->response = std::make_shared<const CachedResponse>(std::move(response));
  it->bytes = kEntryOverheadBytes + static_cast<int64_t>(it->key_text.size()) +
              static_cast<int64_t>(it->response->payload.size() + it->response->id.size());
  s.exact[key] = it;
  if (!embedding.empty()) {
    try {
      if (s.hnsw == nullptr) {
        s.space = std::make_unique<DotProductSpace>(static_cast<size_t>(options_.dim));
        s.hnsw = std::make_unique<hnswlib::HierarchicalNSW<float>>(
            s.space.get(), kInitialSlots, static_cast<size_t>(options_.hnsw_m),
            static_cast<size_t>(options_.hnsw_ef_construction));
      }
      size_t slot;
      if (!s.free_slots.empty()) {
        slot = s.free_slots.back();
        s.free_slots.pop_back();
      } else {
        if (s.num_slots == s.hnsw->max_elements_) s.hnsw->resizeIndex(2 * s.num_slots);
        slot = s.num_slots++;
        s.slot_entry.resize(s.num_slots);
      }
      // A reused slot's label exists (marked deleted): addPoint unmarks and overwrites it.
      s.hnsw->addPoint(embedding.data(), slot);
      s.slot_entry[slot] = it;
      it->slot = slot;
      ++s.num_embedded;
      it->bytes += static_cast<int64_t>(s.hnsw->size_data_per_element_ + embedding.size() * sizeof(float));
      it->embedding = std::move(embedding);
    } catch (const std::exception& e) {
      bytes_ += it->bytes;
      erase(it);
      return ResourceExhaustedError(std::string("semantic cache index: ") + e.what());
    }
  }
  bytes_ += it->bytes;
  return OkStatus();
}

SemanticCacheStats SemanticCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  SemanticCacheStats s = counters_;
  s.entries = static_cast<int64_t>(lru_.size());
  s.scopes = static_cast<int64_t>(scopes_.size());
  s.bytes = bytes_;
  return s;
}

void SemanticCache::check_invariants() const {
  std::lock_guard<std::mutex> lock(mu_);
  KV_CHECK_LE(static_cast<int64_t>(lru_.size()), options_.max_entries);
  int64_t bytes = 0;
  size_t exact = 0;
  for (const Entry& e : lru_) {
    bytes += e.bytes;
    auto sit = scopes_.find(e.scope);
    KV_CHECK(sit != scopes_.end());
    auto x = sit->second->exact.find(e.key_hash);
    KV_CHECK(x != sit->second->exact.end() && &*x->second == &e);
    if (e.slot != kNoSlot) KV_CHECK(&*sit->second->slot_entry[e.slot] == &e);
  }
  for (const auto& [scope, s] : scopes_) {
    KV_CHECK(!s->exact.empty()) << "an empty scope is kept";
    exact += s->exact.size();
    KV_CHECK_EQ(s->num_slots, s->free_slots.size() + static_cast<size_t>(s->num_embedded));
  }
  KV_CHECK_EQ(exact, lru_.size());
  KV_CHECK_EQ(bytes, bytes_);
}

}  // namespace kvserve::semcache

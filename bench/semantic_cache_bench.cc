// Cost of the response cache (tier 1, src/semcache) at 10K, 100K and 1M entries (plain
// executable): insert time, and lookup latency p50/p99 for exact repeats, semantic hits
// (a stored vector perturbed to similarity ~0.97), and misses (a random vector), with the
// hnswlib index at its defaults (M 16, ef_construction 100, ef_search 64). Embeddings are random
// unit vectors of --dim values (384: all-MiniLM-L6-v2's and bge-small's size), one scope.
//
//   semantic_cache_bench [--sizes 10000,100000,1000000] [--dim 384] [--lookups 2000]
//                        [--ef-search 64]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/percentile.h"
#include "semcache/semantic_cache.h"

namespace {

using namespace kvserve::semcache;
using Clock = std::chrono::steady_clock;

std::vector<float> RandomUnit(std::mt19937_64& rng, int dim) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(dim));
  double s = 0.0;
  for (float& x : v) {
    x = n(rng);
    s += x * x;
  }
  for (float& x : v) x = static_cast<float>(x / std::sqrt(s));
  return v;
}

// `v` moved towards a random direction so that its cosine similarity to `v` is about `sim`.
std::vector<float> Near(const std::vector<float>& v, float sim, std::mt19937_64& rng) {
  std::vector<float> r = RandomUnit(rng, static_cast<int>(v.size()));
  const float a = sim, b = std::sqrt(1.0f - sim * sim);
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = a * v[i] + b * r[i];
  return out;
}

double Us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes = {10000, 100000, 1000000};
  int dim = 384;
  int lookups = 2000;
  int ef_search = SemanticCacheOptions{}.hnsw_ef_search;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--sizes") {
      sizes.clear();
      std::stringstream ss(argv[i + 1]);
      std::string item;
      while (std::getline(ss, item, ',')) sizes.push_back(std::stoll(item));
    } else if (flag == "--dim") {
      dim = std::atoi(argv[i + 1]);
    } else if (flag == "--lookups") {
      lookups = std::atoi(argv[i + 1]);
    } else if (flag == "--ef-search") {
      ef_search = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: %s [--sizes N,...] [--dim D] [--lookups K] [--ef-search E]\n",
                   argv[0]);
      return 2;
    }
  }
  std::printf("| entries | insert µs (mean) | exact p50 / p99 µs | semantic hit p50 / p99 µs | miss p50 / p99 µs | semantic recall | bytes |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (int64_t n : sizes) {
    SemanticCacheOptions o;
    o.max_entries = n;
    o.dim = dim;
    o.hnsw_ef_search = ef_search;
    SemanticCache cache(o);
    const Hash128 scope = HashText("bench scope");
    std::mt19937_64 rng(42);
    std::vector<std::vector<float>> vectors;
    vectors.reserve(static_cast<size_t>(n));
    const auto start = Clock::now();
    for (int64_t i = 0; i < n; ++i) {
      vectors.push_back(RandomUnit(rng, dim));
      CachedResponse r{"id" + std::to_string(i), "{\"text\": \"answer " + std::to_string(i) + "\"}", 16, 0.1};
      if (!cache.Insert(scope, "question " + std::to_string(i), vectors.back(), std::move(r)).ok()) {
        std::fprintf(stderr, "insert failed at %lld\n", static_cast<long long>(i));
        return 1;
      }
      if ((i + 1) % 50000 == 0) {
        std::fprintf(stderr, "\r%lld entries: %lld inserted", static_cast<long long>(n),
                     static_cast<long long>(i + 1));
      }
    }
    std::fprintf(stderr, "\n");
    const double insert_us = Us(Clock::now() - start) / static_cast<double>(n);
    std::vector<double> exact, semantic, miss;
    int found = 0;
    for (int k = 0; k < lookups; ++k) {
      const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
      const std::string key = "question " + std::to_string(i);
      auto t0 = Clock::now();
      LookupResult r = cache.Lookup(scope, key, {}, 0.96f);
      exact.push_back(Us(Clock::now() - t0));
      if (r.kind != HitKind::kExact) std::fprintf(stderr, "exact miss at %lld\n", static_cast<long long>(i));
      // A paraphrase: same numbers (no veto), a vector at similarity ~0.98.
      const std::vector<float> q = Near(vectors[static_cast<size_t>(i)], 0.98f, rng);
      t0 = Clock::now();
      r = cache.Lookup(scope, "question " + std::to_string(i) + " please", q, 0.96f);
      semantic.push_back(Us(Clock::now() - t0));
      found += r.kind == HitKind::kSemantic && r.response->id == "id" + std::to_string(i);
      const std::vector<float> m = RandomUnit(rng, dim);
      t0 = Clock::now();
      r = cache.Lookup(scope, "something else entirely", m, 0.96f);
      miss.push_back(Us(Clock::now() - t0));
    }
    using kvserve::Percentile;
    std::printf("| %lld | %.1f | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.3f | %.0f MiB |\n",
                static_cast<long long>(n), insert_us, Percentile(exact, 50), Percentile(exact, 99),
                Percentile(semantic, 50), Percentile(semantic, 99), Percentile(miss, 50),
                Percentile(miss, 99), static_cast<double>(found) / lookups,
                static_cast<double>(cache.stats().bytes) / (1 << 20));
    std::fflush(stdout);
  }
  return 0;
}

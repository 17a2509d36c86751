#include "promptlint/prompt_lint.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>
#include <utility>

#include "base/check.h"
#include "kv/kv_cache_manager.h"

namespace kvserve::promptlint {
namespace {

// Polynomial hashes of K-token windows modulo the Mersenne prime 2^61 - 1 (rolling: O(1) per
// position). Collisions are possible in principle; every use that moves a boundary compares the
// tokens themselves.
constexpr uint64_t kMod = (uint64_t{1} << 61) - 1;
constexpr uint64_t kBase = 0x1b873593a3b1c5d7ULL % kMod;

uint64_t MulMod(uint64_t a, uint64_t b) {
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  uint64_t r = static_cast<uint64_t>(p & kMod) + static_cast<uint64_t>(p >> 61);
  return r >= kMod ? r - kMod : r;
}

uint64_t TokenValue(TokenId t) { return static_cast<uint64_t>(static_cast<uint32_t>(t)) + 1; }

// Hash of tokens[i, i + k) for every i in [0, size - k] (empty when the prompt is shorter).
std::vector<uint64_t> WindowHashes(const std::vector<TokenId>& tokens, int64_t k) {
  std::vector<uint64_t> out;
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < k) return out;
  out.reserve(static_cast<size_t>(n - k + 1));
  uint64_t top = 1;  // kBase^(k-1)
  for (int64_t j = 1; j < k; ++j) top = MulMod(top, kBase);
  uint64_t h = 0;
  for (int64_t j = 0; j < k; ++j) h = (MulMod(h, kBase) + TokenValue(tokens[j])) % kMod;
  out.push_back(h);
  for (int64_t i = 1; i + k <= n; ++i) {
    const uint64_t drop = MulMod(TokenValue(tokens[i - 1]), top);
    h = (h + kMod - drop) % kMod;
    h = (MulMod(h, kBase) + TokenValue(tokens[i + k - 1])) % kMod;
    out.push_back(h);
  }
  return out;
}

int64_t CommonPrefix(const TokenId* a, int64_t na, const TokenId* b, int64_t nb) {
  const int64_t n = std::min(na, nb);
  int64_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

// Union-find over prompt indices of one namespace; the root of a set is its smallest index.
class DisjointSets {
 public:
  explicit DisjointSets(size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
  size_t find(size_t x) {
    while (parent_[x] != x) {
      parent_[x] = parent_[parent_[x]];
      x = parent_[x];
    }
    return x;
  }
  void unite(size_t a, size_t b) {
    a = find(a);
    b = find(b);
    if (a == b) return;
    if (b < a) std::swap(a, b);
    parent_[b] = a;
  }

 private:
  std::vector<size_t> parent_;
};

// Where one prompt of a cluster has its span and its shared region.
struct MemberSpan {
  size_t prompt = 0;        // index into the input
  int64_t span_end = 0;     // b: the span is [a, b)
  int64_t shared_end = 0;   // e: the shared region is [b, e)
};

// A span found, before its replays.
struct FoundSpan {
  size_t first_prompt = 0;
  int64_t begin = 0;       // a
  int64_t rep_shared_begin = 0;  // the shared region's start in the first prompt
  std::vector<MemberSpan> members;  // members that hold the shared region, in file order
  std::vector<size_t> cluster;      // every prompt of the cluster, in file order
};

// Longest run of consecutive positions in [from, size) satisfying `pred`: (start, length).
template <typename Pred>
std::pair<int64_t, int64_t> LongestRun(int64_t from, int64_t size, Pred pred) {
  int64_t best_start = -1, best_len = 0, start = -1;
  for (int64_t i = from; i <= size; ++i) {
    const bool in = i < size && pred(i);
    if (in && start < 0) start = i;
    if (!in && start >= 0) {
      if (i - start > best_len) {
        best_len = i - start;
        best_start = start;
      }
      start = -1;
    }
  }
  return {best_start, best_len};
}

// Steps 1-4 of the file comment for the prompts `idx` (one namespace, file order).
void FindSpansInNamespace(const std::vector<LintPrompt>& prompts, const std::vector<size_t>& idx,
                          const PromptLintOptions& o, int64_t* num_clusters,
                          std::vector<FoundSpan>* out) {
  const int64_t k = o.kgram_tokens;
  const int64_t min_positions = o.min_shared_tokens - k + 1;  // a run of L tokens
  std::vector<std::vector<uint64_t>> hashes(idx.size());
  for (size_t j = 0; j < idx.size(); ++j) hashes[j] = WindowHashes(prompts[idx[j]].tokens, k);

  // 1. Which prompts hold each window (the first two, and how many).
  struct Holders {
    int32_t first = -1;
    int32_t second = -1;
    int32_t last = -1;
    int32_t count = 0;
  };
  std::unordered_map<uint64_t, Holders> holders;
  for (size_t j = 0; j < idx.size(); ++j) {
    for (uint64_t h : hashes[j]) {
      Holders& e = holders[h];
      if (e.last == static_cast<int32_t>(j)) continue;
      e.last = static_cast<int32_t>(j);
      if (e.first < 0) {
        e.first = static_cast<int32_t>(j);
      } else if (e.second < 0) {
        e.second = static_cast<int32_t>(j);
      }
      ++e.count;
    }
  }

  // 2. Clusters.
  DisjointSets sets(idx.size());
  for (size_t j = 0; j < idx.size(); ++j) {
    const std::vector<uint64_t>& hs = hashes[j];
    const auto [start, len] = LongestRun(0, static_cast<int64_t>(hs.size()), [&](int64_t i) {
      return holders[hs[static_cast<size_t>(i)]].count >= 2;
    });
    if (len < min_positions) continue;
    const Holders& mid = holders[hs[static_cast<size_t>(start + len / 2)]];
    const int32_t other = mid.first != static_cast<int32_t>(j) ? mid.first : mid.second;
    if (other >= 0) sets.unite(j, static_cast<size_t>(other));
  }
  std::map<size_t, std::vector<size_t>> clusters;  // root -> members (local indices, in order)
  for (size_t j = 0; j < idx.size(); ++j) clusters[sets.find(j)].push_back(j);

  // 3-4. Per cluster.
  for (const auto& [root, members] : clusters) {
    if (static_cast<int64_t>(members.size()) < std::max<int64_t>(2, o.min_requests)) continue;
    ++*num_clusters;
    const std::vector<TokenId>& rep = prompts[idx[members[0]]].tokens;
    const int64_t rep_n = static_cast<int64_t>(rep.size());
    int64_t a = rep_n;
    for (size_t m : members) {
      const std::vector<TokenId>& t = prompts[idx[m]].tokens;
      a = std::min(a, CommonPrefix(rep.data(), rep_n, t.data(), static_cast<int64_t>(t.size())));
    }
    // Windows at or after `a` that every member holds.
    std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> seen;  // hash -> (count, last)
    for (size_t mi = 0; mi < members.size(); ++mi) {
      const std::vector<uint64_t>& hs = hashes[members[mi]];
      for (size_t i = static_cast<size_t>(a); i < hs.size(); ++i) {
        auto& e = seen[hs[i]];
        if (e.second == static_cast<int32_t>(mi) + 1) continue;
        e.second = static_cast<int32_t>(mi) + 1;
        ++e.first;
      }
    }
    const int32_t all = static_cast<int32_t>(members.size());
    auto common = [&](uint64_t h) {
      auto it = seen.find(h);
      return it != seen.end() && it->second.first == all;
    };
    const std::vector<uint64_t>& rep_h = hashes[members[0]];
    const auto [s, run] = LongestRun(a, static_cast<int64_t>(rep_h.size()), [&](int64_t i) {
      return common(rep_h[static_cast<size_t>(i)]);
    });
    if (run < min_positions) continue;
    const uint64_t anchor = rep_h[static_cast<size_t>(s)];

    FoundSpan f;
    f.first_prompt = idx[members[0]];
    f.begin = a;
    f.rep_shared_begin = s;
    bool any_span = false;
    for (size_t m : members) {
      f.cluster.push_back(idx[m]);
      const std::vector<TokenId>& t = prompts[idx[m]].tokens;
      const std::vector<uint64_t>& hs = hashes[m];
      int64_t b = -1;
      for (size_t i = static_cast<size_t>(a); i < hs.size(); ++i) {
        if (hs[i] == anchor && std::equal(t.begin() + static_cast<int64_t>(i),
                                          t.begin() + static_cast<int64_t>(i) + k,
                                          rep.begin() + s)) {
          b = static_cast<int64_t>(i);
          break;
        }
      }
      if (b < 0) continue;
      const int64_t shared =
          CommonPrefix(t.data() + b, static_cast<int64_t>(t.size()) - b, rep.data() + s, rep_n - s);
      if (shared < o.min_shared_tokens) continue;
      f.members.push_back({idx[m], b, b + shared});
      any_span = any_span || b > a;
    }
    if (any_span) out->push_back(std::move(f));
  }
}

// The prompt with [a, b) moved to after [b, e).
std::vector<TokenId> Reordered(const std::vector<TokenId>& t, int64_t a, const MemberSpan& m) {
  std::vector<TokenId> out;
  out.reserve(t.size());
  out.insert(out.end(), t.begin(), t.begin() + a);
  out.insert(out.end(), t.begin() + m.span_end, t.begin() + m.shared_end);
  out.insert(out.end(), t.begin() + a, t.begin() + m.span_end);
  out.insert(out.end(), t.begin() + m.shared_end, t.end());
  return out;
}

std::string IdsText(const std::vector<TokenId>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) s += ' ';
    s += std::to_string(ids[i]);
  }
  return s + "]";
}

std::vector<TokenId> Slice(const std::vector<TokenId>& t, int64_t begin, int64_t end) {
  begin = std::clamp<int64_t>(begin, 0, static_cast<int64_t>(t.size()));
  end = std::clamp<int64_t>(end, begin, static_cast<int64_t>(t.size()));
  return {t.begin() + begin, t.begin() + end};
}

double Rate(int64_t num, int64_t den) {
  return den > 0 ? static_cast<double>(num) / static_cast<double>(den) : 0.0;
}

}  // namespace

Status PromptLintOptions::Validate() const {
  if (block_size_tokens < 1 || block_size_tokens > 65536) {
    return InvalidArgumentError("block size must be in [1, 65536] tokens");
  }
  if (capacity_blocks < 0) return InvalidArgumentError("capacity must be >= 0 blocks (0: unbounded)");
  if (kgram_tokens < 2) return InvalidArgumentError("k-gram length must be >= 2 tokens");
  if (min_shared_tokens < kgram_tokens) {
    return InvalidArgumentError("min shared tokens (" + std::to_string(min_shared_tokens) +
                                ") must be >= the k-gram length (" +
                                std::to_string(kgram_tokens) + ")");
  }
  if (min_requests < 2) return InvalidArgumentError("min requests must be >= 2");
  if (max_examples < 0) return InvalidArgumentError("max examples must be >= 0");
  if (max_spans < 0) return InvalidArgumentError("max spans must be >= 0");
  return OkStatus();
}

StatusOr<ReplayResult> ReplayPrefixCache(const std::vector<LintPrompt>& prompts,
                                         int64_t block_size_tokens, int64_t capacity_blocks) {
  if (block_size_tokens < 1) return InvalidArgumentError("block size must be >= 1 token");
  ReplayResult r;
  int64_t needed_blocks = 1;
  for (const LintPrompt& p : prompts) {
    const int64_t n = static_cast<int64_t>(p.tokens.size());
    needed_blocks += (n + block_size_tokens - 1) / block_size_tokens;
  }
  KvCacheManagerOptions ko;
  ko.block_size = block_size_tokens;
  ko.num_blocks = capacity_blocks > 0 ? capacity_blocks : needed_blocks;
  ko.enable_prefix_caching = true;
  ko.eviction_history_size = 1024;  // misses by reason are not reported here
  KvCacheManager kv(ko);
  r.cached_tokens_per_prompt.assign(prompts.size(), 0);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const LintPrompt& p = prompts[i];
    const int64_t n = static_cast<int64_t>(p.tokens.size());
    if (n == 0) continue;
    const SeqId id = static_cast<SeqId>(i);
    const PrefixMatch m = kv.match(p.cache_namespace, p.tokens);
    kv.start_sequence(id, p.cache_namespace, m);
    if (!kv.allocate_slots(id, n)) {
      kv.free(id);
      return InvalidArgumentError("line " + std::to_string(p.line) + ": the prompt needs " +
                                  std::to_string((n + block_size_tokens - 1) / block_size_tokens) +
                                  " blocks of " + std::to_string(block_size_tokens) +
                                  " tokens, more than the capacity of " +
                                  std::to_string(capacity_blocks) + " blocks");
    }
    kv.commit(id, p.tokens, n);
    kv.free(id);
    r.prompt_tokens += n;
    r.cached_tokens += m.num_cached_tokens;
    r.cached_tokens_per_prompt[i] = m.num_cached_tokens;
  }
  return r;
}

StatusOr<PromptLintReport> AnalyzePrompts(const std::vector<LintPrompt>& prompts,
                                          const PromptLintOptions& o, const TokenDecoder& decode) {
  KV_RETURN_IF_ERROR(o.Validate());
  PromptLintReport report;
  report.options = o;
  report.num_requests = static_cast<int64_t>(prompts.size());
  std::map<std::string, std::vector<size_t>> by_namespace;
  for (size_t i = 0; i < prompts.size(); ++i) {
    by_namespace[prompts[i].cache_namespace].push_back(i);
    report.num_prompt_tokens += static_cast<int64_t>(prompts[i].tokens.size());
  }
  report.num_namespaces = static_cast<int64_t>(by_namespace.size());

  std::vector<FoundSpan> found;
  for (const auto& [ns, idx] : by_namespace) {
    FindSpansInNamespace(prompts, idx, o, &report.num_clusters, &found);
  }
  report.num_spans_found = static_cast<int64_t>(found.size());

  KV_ASSIGN_OR_RETURN(const ReplayResult base,
                      ReplayPrefixCache(prompts, o.block_size_tokens, o.capacity_blocks));
  report.cached_tokens = base.cached_tokens;
  report.hit_rate = base.hit_rate();

  auto text = [&](const std::vector<TokenId>& ids) {
    return decode ? decode(ids) : IdsText(ids);
  };
  std::vector<LintPrompt> all_reordered = prompts;
  for (const FoundSpan& f : found) {
    VolatileSpan v;
    const LintPrompt& rep = prompts[f.first_prompt];
    v.cache_namespace = rep.cache_namespace;
    v.first_line = rep.line;
    v.num_cluster_requests = static_cast<int64_t>(f.cluster.size());
    v.begin_tokens = f.begin;
    v.min_end_tokens = INT64_MAX;
    v.min_span_tokens = INT64_MAX;
    v.shared_tokens = INT64_MAX;
    v.context_before_text = text(Slice(rep.tokens, f.begin - 12, f.begin));
    v.shared_start_text = text(Slice(rep.tokens, f.rep_shared_begin, f.rep_shared_begin + 12));
    std::vector<LintPrompt> reordered = prompts;
    std::set<std::vector<TokenId>> distinct;
    for (const MemberSpan& m : f.members) {
      const LintPrompt& p = prompts[m.prompt];
      v.min_end_tokens = std::min(v.min_end_tokens, m.span_end);
      v.max_end_tokens = std::max(v.max_end_tokens, m.span_end);
      v.shared_tokens = std::min(v.shared_tokens, m.shared_end - m.span_end);
      if (m.span_end == f.begin) continue;
      const int64_t len = m.span_end - f.begin;
      ++v.num_requests;
      v.min_span_tokens = std::min(v.min_span_tokens, len);
      v.max_span_tokens = std::max(v.max_span_tokens, len);
      reordered[m.prompt].tokens = Reordered(p.tokens, f.begin, m);
      all_reordered[m.prompt].tokens = reordered[m.prompt].tokens;
      std::vector<TokenId> value = Slice(p.tokens, f.begin, m.span_end);
      if (static_cast<int64_t>(v.examples.size()) < o.max_examples && distinct.insert(value).second) {
        SpanExample e;
        e.line = p.line;
        e.begin_tokens = f.begin;
        e.end_tokens = m.span_end;
        e.text = text(value);
        e.tokens = std::move(value);
        v.examples.push_back(std::move(e));
      }
    }
    KV_ASSIGN_OR_RETURN(const ReplayResult after,
                        ReplayPrefixCache(reordered, o.block_size_tokens, o.capacity_blocks));
    v.cached_tokens_before = base.cached_tokens;
    v.cached_tokens_after = after.cached_tokens;
    v.hit_rate_before = base.hit_rate();
    v.hit_rate_after = after.hit_rate();
    int64_t cluster_tokens = 0, cluster_before = 0, cluster_after = 0;
    for (size_t i : f.cluster) {
      cluster_tokens += static_cast<int64_t>(prompts[i].tokens.size());
      cluster_before += base.cached_tokens_per_prompt[i];
      cluster_after += after.cached_tokens_per_prompt[i];
    }
    v.cluster_hit_rate_before = Rate(cluster_before, cluster_tokens);
    v.cluster_hit_rate_after = Rate(cluster_after, cluster_tokens);
    report.spans.push_back(std::move(v));
  }
  KV_ASSIGN_OR_RETURN(const ReplayResult all,
                      ReplayPrefixCache(all_reordered, o.block_size_tokens, o.capacity_blocks));
  report.cached_tokens_all_reordered = all.cached_tokens;
  report.hit_rate_all_reordered = all.hit_rate();

  std::stable_sort(report.spans.begin(), report.spans.end(),
                   [](const VolatileSpan& x, const VolatileSpan& y) {
                     const int64_t gx = x.cached_tokens_after - x.cached_tokens_before;
                     const int64_t gy = y.cached_tokens_after - y.cached_tokens_before;
                     if (gx != gy) return gx > gy;
                     return x.first_line < y.first_line;
                   });
  if (static_cast<int64_t>(report.spans.size()) > o.max_spans) {
    report.spans.resize(static_cast<size_t>(o.max_spans));
  }
  return report;
}

}  // namespace kvserve::promptlint

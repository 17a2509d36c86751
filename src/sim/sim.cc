// `kvserve sim`: prefix-cache replay of a request trace (see sim.h and docs/prefix-caching.md).
#include "sim/sim.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <thread>
#include <unordered_set>
#include <utility>

#include "base/hash.h"
#include "base/percentile.h"
#include "base/str_format.h"
#include "base/check.h"
#include "runtime/scheduler.h"
#include "sim/replica.h"

namespace kvserve::sim {
namespace {

// Largest capacity replayed: the block pool's bookkeeping is ~40 bytes per block.
constexpr int64_t kMaxCapacityBlocks = int64_t{1} << 24;
constexpr int64_t kDefaultSweep512[] = {1000, 2000, 5000, 10000, 20000, 50000, 100000};


std::string Namespace(const SimOptions& o, size_t request_index) {
  if (o.tenants <= 1) return "sim";
  return "sim|tenant-" + std::to_string(request_index % static_cast<size_t>(o.tenants));
}

int64_t& MissRef(KvCacheManagerStats& s, PrefixMissReason r) {
  return s.miss_tokens[static_cast<int>(r)];
}

double Ratio(int64_t a, int64_t b) {
  return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Status ValidateSimOptions(const SimOptions& o) {
  if (o.block_tokens < 1 || o.block_tokens > (1 << 20)) {
    return InvalidArgumentError("--block-tokens must be in [1, 1048576]");
  }
  if (o.hash_block_tokens < 1 || o.hash_block_tokens > (1 << 20)) {
    return InvalidArgumentError("--hash-block-tokens must be in [1, 1048576]");
  }
  if (!(o.decode_tokens_per_s > 0) || !std::isfinite(o.decode_tokens_per_s)) {
    return InvalidArgumentError("--decode-tokens-per-s must be a positive number");
  }
  if (!(o.prefill_tokens_per_s > 0) || !std::isfinite(o.prefill_tokens_per_s)) {
    return InvalidArgumentError("--prefill-tokens-per-s must be a positive number");
  }
  KV_RETURN_IF_ERROR(ValidateSchedulerFlags(o.scheduler));
  if (o.deployment) {
    KV_RETURN_IF_ERROR(cost::ValidateDeployment(*o.deployment));
    if (o.deployment->kv.block_size != o.block_tokens) {
      return InvalidArgumentError("sim: the cost model's KV block size differs from --block-size");
    }
  }
  if (o.max_model_len < 0 || o.max_model_len == 1) {
    return InvalidArgumentError("--max-model-len must be 0 (from the trace) or at least 2");
  }
  if (o.kv_policy.method != KvEvictionMethod::kNone) {
    KV_RETURN_IF_ERROR(o.kv_policy.Validate());
    if (o.kv_policy.method == KvEvictionMethod::kPyramidKv) {
      return InvalidArgumentError("sim: --kv-eviction pyramidkv is not simulated (its layers keep "
                                  "different counts); streaming, h2o and snapkv are");
    }
  }
  if (o.max_requests < 0) return InvalidArgumentError("--max-requests must be >= 0");
  if (o.tenants < 1) return InvalidArgumentError("--tenants must be at least 1");
  if (o.threads < 0) return InvalidArgumentError("--threads must be >= 0");
  for (int64_t c : o.capacities_blocks) {
    if (c < 1 || c > kMaxCapacityBlocks) {
      return InvalidArgumentError(StrFormat("--kv-cache-blocks %lld: must be in [1, %lld]",
                                         static_cast<long long>(c),
                                         static_cast<long long>(kMaxCapacityBlocks)));
    }
  }
  return OkStatus();
}

double SimRow::token_hit_rate() const {
  return Ratio(stats.prefix_hits_tokens, stats.prefix_queries_tokens);
}
double SimRow::block_hit_rate() const {
  return Ratio(stats.prefix_hits_blocks, stats.prefix_queries_blocks);
}

void TracePromptTokens(const TraceRequest& r, int64_t hash_block_tokens,
                       std::vector<TokenId>* tokens) {
  tokens->clear();
  tokens->reserve(static_cast<size_t>(r.input_tokens));
  const int64_t h = hash_block_tokens;
  for (size_t k = 0; k < r.hash_ids.size(); ++k) {
    const int64_t n = std::min<int64_t>(h, r.input_tokens - static_cast<int64_t>(k) * h);
    const TokenId base = static_cast<TokenId>(r.hash_ids[k] * h);
    for (int64_t o = 0; o < n; ++o) tokens->push_back(base + static_cast<TokenId>(o));
  }
}

std::vector<TokenId> TracePromptTokens(const TraceRequest& r, int64_t hash_block_tokens) {
  std::vector<TokenId> t;
  TracePromptTokens(r, hash_block_tokens, &t);
  return t;
}

StatusOr<SimRow> SimulateCapacity(const std::vector<TraceRequest>& trace, const SimOptions& o,
                                  int64_t capacity_blocks) {
  KV_RETURN_IF_ERROR(ValidateSimOptions(o));
  if (capacity_blocks < 1 || capacity_blocks > kMaxCapacityBlocks) {
    return InvalidArgumentError("capacity out of range");
  }
  const auto start = std::chrono::steady_clock::now();
  StatusOr<std::unique_ptr<ReplicaSim>> created = ReplicaSim::Create(trace, o, capacity_blocks);
  if (!created.ok()) return created.status();
  ReplicaSim& replica = **created;
  const std::vector<size_t> order = ArrivalOrder(trace);
  size_t next = 0;
  while (next < order.size() || replica.busy()) {
    if (!replica.busy()) replica.AdvanceTo(ArrivalSeconds(trace[order[next]]));
    for (; next < order.size() && ArrivalSeconds(trace[order[next]]) <= replica.now_s(); ++next) {
      replica.Add(order[next]);
    }
    if (!replica.busy()) continue;  // everything that arrived was rejected
    KV_RETURN_IF_ERROR(replica.Step());
  }
  SimRow row = replica.Finish();
  KV_CHECK_EQ(row.num_requests + row.num_rejected, static_cast<int64_t>(trace.size()));
  row.elapsed_s = SecondsSince(start);
  return row;
}

SimRow SimulateUnbounded(const std::vector<TraceRequest>& trace, const SimOptions& o) {
  const int64_t bs = o.block_tokens;
  const int64_t h = o.hash_block_tokens;
  SimRow row;
  row.capacity_blocks = -1;
  KvCacheManagerStats& st = row.stats;
  std::unordered_set<uint64_t> seen_in_ns;  // block prefixes keyed with their namespace
  std::unordered_set<uint64_t> seen_any;    // the same without the namespace
  std::vector<uint64_t> keys;
  for (size_t i : ArrivalOrder(trace)) {
    const TraceRequest& r = trace[i];
    const uint64_t ns_key = std::hash<std::string>()(Namespace(o, i));
    const int64_t len = r.input_tokens;
    const int64_t num_full = len / bs;
    const int64_t max_cached = (len - 1) / bs;
    // Key of full cache block j: the hash-id chain up to the hash block holding its last
    // token, and that token's offset in it (tokens are a function of exactly that).
    keys.clear();
    uint64_t chain = 0x5a17ull;
    int64_t chained = 0;  // hash ids folded into `chain`
    for (int64_t j = 0; j < num_full; ++j) {
      const int64_t last = (j + 1) * bs - 1;
      while (chained <= last / h) chain = HashCombine(chain, static_cast<uint64_t>(r.hash_ids[chained++]));
      keys.push_back(HashCombine(chain, static_cast<uint64_t>(last % h)));
    }
    int64_t matched = 0;
    while (matched < num_full && seen_in_ns.count(HashCombine(keys[matched], ns_key))) ++matched;
    const int64_t hit = std::min(matched, max_cached);
    ++st.prefix_queries;
    st.prefix_hits += hit > 0;
    st.prefix_queries_tokens += len;
    st.prefix_hits_tokens += hit * bs;
    st.prefix_queries_blocks += num_full;
    st.prefix_hits_blocks += hit;
    MissRef(st, PrefixMissReason::kLastTokenRecomputed) += (matched - hit) * bs;
    for (int64_t j = matched; j < num_full; ++j) {
      MissRef(st, seen_any.count(keys[j]) ? PrefixMissReason::kOtherNamespace
                                          : PrefixMissReason::kNeverSeen) += bs;
    }
    MissRef(st, PrefixMissReason::kPartialBlock) += len % bs;
    for (uint64_t k : keys) {
      seen_in_ns.insert(HashCombine(k, ns_key));
      seen_any.insert(k);
    }
    ++row.num_requests;
  }
  return row;
}

std::vector<TraceRequest> TraceHead(const std::vector<TraceRequest>& trace, const SimOptions& o) {
  const size_t n = o.max_requests > 0 ? std::min<size_t>(trace.size(), o.max_requests)
                                      : trace.size();
  return std::vector<TraceRequest>(trace.begin(), trace.begin() + static_cast<long>(n));
}

StatusOr<SimReport> RunSim(const std::vector<TraceRequest>& full_trace, const SimOptions& o) {
  KV_RETURN_IF_ERROR(ValidateSimOptions(o));
  SimReport rep;
  rep.options = o;
  const std::vector<TraceRequest> trace = TraceHead(full_trace, o);
  if (rep.options.capacities_blocks.empty()) {
    for (int64_t c : kDefaultSweep512) {
      rep.options.capacities_blocks.push_back(std::max<int64_t>(1, c * 512 / o.block_tokens));
    }
  }
  rep.num_requests = static_cast<int64_t>(trace.size());
  std::unordered_set<int64_t> distinct;
  for (const TraceRequest& r : trace) {
    rep.num_prompt_tokens += r.input_tokens;
    rep.num_hash_blocks += static_cast<int64_t>(r.hash_ids.size());
    distinct.insert(r.hash_ids.begin(), r.hash_ids.end());
  }
  rep.num_distinct_hash_ids = static_cast<int64_t>(distinct.size());
  const auto start = std::chrono::steady_clock::now();
  // Capacities are independent replays (a KvCacheManager each): run them on worker threads,
  // the largest first (they take longest), claiming them from one counter.
  const size_t num_rows = rep.options.capacities_blocks.size();
  std::vector<size_t> by_size(num_rows);
  for (size_t i = 0; i < num_rows; ++i) by_size[i] = i;
  std::stable_sort(by_size.begin(), by_size.end(), [&](size_t a, size_t b) {
    return rep.options.capacities_blocks[a] > rep.options.capacities_blocks[b];
  });
  std::vector<StatusOr<SimRow>> results(num_rows, StatusOr<SimRow>(InternalError("not run")));
  std::atomic<size_t> next_row{0};
  auto worker = [&]() {
    for (size_t k = next_row++; k < num_rows; k = next_row++) {
      const size_t i = by_size[k];
      results[i] = SimulateCapacity(trace, rep.options, rep.options.capacities_blocks[i]);
    }
  };
  int threads = o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = std::clamp(threads, 1, static_cast<int>(std::max<size_t>(num_rows, 1)));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  rep.threads = threads;
  for (StatusOr<SimRow>& r : results) {
    if (!r.ok()) return r.status();
    rep.rows.push_back(std::move(r).value());
  }
  rep.unbounded = SimulateUnbounded(trace, rep.options);
  rep.elapsed_s = SecondsSince(start);
  return rep;
}

TraceSummary SummarizeTrace(const std::vector<TraceRequest>& trace, const SimOptions& options,
                            int64_t max_model_len) {
  TraceSummary t;
  t.num_requests = static_cast<int64_t>(trace.size());
  double prompt = 0.0, output = 0.0;
  int64_t counted = 0;
  for (const TraceRequest& r : trace) {
    if (r.input_tokens + std::max<int64_t>(1, r.output_tokens) > max_model_len) {
      ++t.num_too_long;
      continue;
    }
    prompt += static_cast<double>(r.input_tokens);
    output += static_cast<double>(std::max<int64_t>(1, r.output_tokens));
    ++counted;
  }
  if (counted > 0) {
    t.mean_prompt_tokens = prompt / static_cast<double>(counted);
    t.mean_output_tokens = output / static_cast<double>(counted);
  }
  t.token_hit_rate = SimulateUnbounded(trace, options).token_hit_rate();
  return t;
}

}  // namespace kvserve::sim

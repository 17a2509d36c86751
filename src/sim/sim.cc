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

namespace kvserve::sim {
namespace {

// Largest capacity replayed: the block pool's bookkeeping is ~40 bytes per block.
constexpr int64_t kMaxCapacityBlocks = int64_t{1} << 24;
constexpr int64_t kDefaultSweep512[] = {1000, 2000, 5000, 10000, 20000, 50000, 100000};


std::string Namespace(const SimOptions& o, size_t request_index) {
  if (o.tenants <= 1) return "sim";
  return "sim|tenant-" + std::to_string(request_index % static_cast<size_t>(o.tenants));
}

// Request indices in arrival order (stable for equal timestamps).
std::vector<size_t> ArrivalOrder(const std::vector<TraceRequest>& trace) {
  std::vector<size_t> order(trace.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return trace[a].timestamp_ms < trace[b].timestamp_ms;
  });
  return order;
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
  if (o.max_model_len < 0 || o.max_model_len == 1) {
    return InvalidArgumentError("--max-model-len must be 0 (from the trace) or at least 2");
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

namespace {

// The token a request "samples": -2 - index, never a prompt token (those are >= 0) nor
// kNoToken.
TokenId OutputToken(SeqId id) { return static_cast<TokenId>(-2 - id); }

double Mean(const std::vector<double>& v) {
  double sum = 0.0;
  for (double x : v) sum += x;
  return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
}

}  // namespace

StatusOr<SimRow> SimulateCapacity(const std::vector<TraceRequest>& trace, const SimOptions& o,
                                  int64_t capacity_blocks) {
  KV_RETURN_IF_ERROR(ValidateSimOptions(o));
  if (capacity_blocks < 1 || capacity_blocks > kMaxCapacityBlocks) {
    return InvalidArgumentError("capacity out of range");
  }
  const auto start = std::chrono::steady_clock::now();
  const int64_t bs = o.block_tokens;
  const int64_t capacity_tokens = capacity_blocks * bs;
  // Remember every eviction (twice the blocks the trace's sequences can commit: recompute
  // after preemption commits, and may evict, a block again), so that "evicted" and "never
  // seen" misses are told apart exactly.
  int64_t num_seq_blocks = 0;
  int64_t longest_tokens = 2;
  for (const TraceRequest& r : trace) {
    const int64_t total = r.input_tokens + std::max<int64_t>(1, r.output_tokens);
    num_seq_blocks += total / bs;
    longest_tokens = std::max(longest_tokens, total);
  }
  KvCacheManager kv({.num_blocks = capacity_blocks,
                     .block_size = bs,
                     .enable_prefix_caching = o.scheduler.enable_prefix_caching,
                     .eviction_history_size = std::max<int64_t>(1, 2 * num_seq_blocks)});
  const std::string where =
      StrFormat("capacity %lld blocks", static_cast<long long>(capacity_blocks));
  StatusOr<SchedulerConfig> resolved = ResolveSchedulerConfig(
      o.scheduler, std::max<int64_t>(2, std::min(o.max_model_len > 0 ? o.max_model_len
                                                                      : longest_tokens,
                                                 capacity_tokens)));
  if (!resolved.ok()) return resolved.status().WithContext(where);
  SchedulerConfig config = *std::move(resolved);
  config.model_namespace = "sim";
  StatusOr<std::unique_ptr<Scheduler>> created = Scheduler::Create(config, &kv);
  if (!created.ok()) return created.status().WithContext(where);
  Scheduler& sched = **created;

  SimRow row;
  row.capacity_blocks = capacity_blocks;
  row.max_model_len = config.max_model_len;
  row.max_num_batched_tokens = config.max_num_batched_tokens;
  const std::vector<size_t> order = ArrivalOrder(trace);
  auto arrival_s = [&](size_t i) { return static_cast<double>(trace[i].timestamp_ms) / 1000.0; };
  // Per request (index = SeqId): whether the sim believes it holds a sequence now, whether it
  // was ever admitted, and whether it sampled its first token.
  std::vector<uint8_t> running(trace.size(), 0), admitted(trace.size(), 0),
      sampled(trace.size(), 0);
  std::vector<double> queue_s, ttft_s;
  queue_s.reserve(trace.size());
  ttft_s.reserve(trace.size());
  const double step_base_s = 1.0 / o.decode_tokens_per_s;
  ModelOutput model;  // reused: clear() keeps the buckets
  KvCacheManagerStats readmit;  // lookups of re-admissions, subtracted at the end
  size_t next = 0;
  double now_s = 0.0;
  int empty_steps = 0;
  while (next < order.size() || sched.has_unfinished()) {
    if (!sched.has_unfinished()) now_s = std::max(now_s, arrival_s(order[next]));
    for (; next < order.size() && arrival_s(order[next]) <= now_s; ++next) {
      const size_t i = order[next];
      const TraceRequest& r = trace[i];
      RequestInput input;
      TracePromptTokens(r, o.hash_block_tokens, &input.prompt_ids);
      input.max_tokens = std::max<int64_t>(1, r.output_tokens);
      input.ignore_eos = true;
      if (o.tenants > 1) input.cache_salt = std::to_string(i % static_cast<size_t>(o.tenants));
      const bool clipped = r.input_tokens + input.max_tokens > config.max_model_len;
      if (!sched.add_request(static_cast<SeqId>(i), std::move(input)).ok()) {
        KV_CHECK_GE(r.input_tokens, config.max_model_len) << "request " << i;
        ++row.num_rejected;
        continue;
      }
      row.num_clipped += clipped;
    }
    if (!sched.has_unfinished()) continue;  // everything that arrived was rejected

    const double step_start_s = now_s;
    const SchedulerOutput out = sched.schedule();
    for (SeqId id : out.preempted_ids) running[static_cast<size_t>(id)] = 0;
    if (out.seqs.empty()) {
      // Only after a step that preempted every running request; the next one admits.
      if (++empty_steps > 2) {
        return InternalError(StrFormat("sim: the scheduler made no progress at %.3f s",
                                       now_s));
      }
      continue;
    }
    empty_steps = 0;
    model.sampled.clear();
    int64_t prefill_tokens = 0;
    for (const ScheduledSeq& s : out.seqs) {
      const size_t i = static_cast<size_t>(s.id);
      const bool decode = s.num_new_tokens == 1 && s.num_computed_tokens >= trace[i].input_tokens;
      if (decode) {
        ++row.num_decode_tokens;
      } else {
        prefill_tokens += s.num_new_tokens;
      }
      if (s.samples) model.sampled.emplace(s.id, OutputToken(s.id));
      if (running[i]) continue;
      // Admitted in this step.
      running[i] = 1;
      if (!admitted[i]) {
        admitted[i] = 1;
        queue_s.push_back(step_start_s - arrival_s(i));
        continue;
      }
      // A re-admission after preemption: its lookup (the tokens it had, prompt and output;
      // nothing was committed since start_sequence, so matching again finds the same) is
      // counted apart.
      const Request* r = sched.request(s.id);
      const PrefixMatch m = kv.match(r->cache_namespace(), r->all_token_ids());
      KV_CHECK_EQ(m.num_cached_tokens, s.num_computed_tokens) << "request " << s.id;
      ++readmit.prefix_queries;
      readmit.prefix_hits += !m.blocks.empty();
      readmit.prefix_queries_tokens += m.num_prompt_tokens;
      readmit.prefix_hits_tokens += m.num_cached_tokens;
      readmit.prefix_queries_blocks += m.num_prompt_tokens / bs;
      readmit.prefix_hits_blocks += static_cast<int64_t>(m.blocks.size());
      for (int k = 0; k < kNumPrefixMissReasons; ++k) readmit.miss_tokens[k] += m.miss_tokens[k];
    }
    row.num_prefill_tokens += prefill_tokens;
    row.peak_blocks_in_use = std::max(row.peak_blocks_in_use, kv.stats().blocks_in_use);
    now_s += step_base_s + static_cast<double>(prefill_tokens) / o.prefill_tokens_per_s;
    for (const ScheduledSeq& s : out.seqs) {
      const size_t i = static_cast<size_t>(s.id);
      if (s.samples && !sampled[i]) {
        sampled[i] = 1;
        ttft_s.push_back(now_s - arrival_s(i));
      }
    }
    for (const RequestOutput& result : sched.update(out, model)) {
      if (!result.finished()) continue;
      running[static_cast<size_t>(result.id)] = 0;
      ++row.num_requests;
      row.end_s = now_s;
    }
    if (o.check_invariants) sched.check_invariants();
  }
  KV_CHECK(kv.num_sequences() == 0);
  const SchedulerStats ss = sched.stats();
  row.num_preemptions = ss.num_preemptions_total;
  row.num_steps = ss.num_steps;
  row.stats = kv.stats();
  KV_CHECK_EQ(row.stats.blocks_in_use, 0) << "blocks leaked";
  KV_CHECK_EQ(row.num_requests + row.num_rejected, static_cast<int64_t>(trace.size()));
  KvCacheManagerStats& st = row.stats;
  st.prefix_queries -= readmit.prefix_queries;
  st.prefix_hits -= readmit.prefix_hits;
  st.prefix_queries_tokens -= readmit.prefix_queries_tokens;
  st.prefix_hits_tokens -= readmit.prefix_hits_tokens;
  st.prefix_queries_blocks -= readmit.prefix_queries_blocks;
  st.prefix_hits_blocks -= readmit.prefix_hits_blocks;
  for (int k = 0; k < kNumPrefixMissReasons; ++k) st.miss_tokens[k] -= readmit.miss_tokens[k];
  KV_CHECK_EQ(st.prefix_queries, row.num_requests);
  row.readmit_queries_tokens = readmit.prefix_queries_tokens;
  row.readmit_hits_tokens = readmit.prefix_hits_tokens;
  row.mean_queue_s = Mean(queue_s);
  row.max_queue_s = queue_s.empty() ? 0.0 : *std::max_element(queue_s.begin(), queue_s.end());
  row.p99_queue_s = Percentile(queue_s, 99.0);
  row.mean_ttft_s = Mean(ttft_s);
  row.p99_ttft_s = Percentile(ttft_s, 99.0);
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

StatusOr<SimReport> RunSim(const std::vector<TraceRequest>& full_trace, const SimOptions& o) {
  KV_RETURN_IF_ERROR(ValidateSimOptions(o));
  SimReport rep;
  rep.options = o;
  std::vector<TraceRequest> trace(
      full_trace.begin(),
      full_trace.begin() +
          static_cast<long>(o.max_requests > 0 ? std::min<size_t>(full_trace.size(), o.max_requests)
                                               : full_trace.size()));
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

}  // namespace kvserve::sim

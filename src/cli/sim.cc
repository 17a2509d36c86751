// `kvserve sim`: prefix-cache replay of a request trace (see sim.h and docs/prefix-caching.md).
#include "cli/sim.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <deque>
#include <fstream>
#include <limits>
#include <memory>
#include <queue>
#include <sstream>
#include <thread>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/hash.h"
#include "base/str_format.h"
#include "base/check.h"
#include "cli/cli_util.h"

namespace kvserve::cli {
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

Status ValidateOptions(const SimOptions& o) {
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
  if (o.max_num_seqs < 1) return InvalidArgumentError("--max-num-seqs must be at least 1");
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
  if (o.format != "text" && o.format != "json") {
    return InvalidArgumentError("--format must be text or json");
  }
  return OkStatus();
}

}  // namespace

double SimRow::token_hit_rate() const {
  return Ratio(stats.prefix_hits_tokens, stats.prefix_queries_tokens);
}
double SimRow::block_hit_rate() const {
  return Ratio(stats.prefix_hits_blocks, stats.prefix_queries_blocks);
}

StatusOr<std::vector<TraceRequest>> ParseMooncakeTrace(std::string_view text,
                                                       int64_t hash_block_tokens) {
  if (hash_block_tokens < 1) return InvalidArgumentError("hash block tokens must be positive");
  std::vector<TraceRequest> out;
  int64_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    auto error = [&](const std::string& what) {
      return InvalidArgumentError(StrFormat("trace line %lld: ", static_cast<long long>(line_no)) +
                                  what);
    };
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return error("not a JSON object");
    auto int_field = [&](const char* name, int64_t min, int64_t* value) -> Status {
      auto it = j.find(name);
      if (it == j.end()) return error(std::string("missing \"") + name + "\"");
      if (it->is_number_integer()) {
        *value = it->get<int64_t>();
      } else if (it->is_number_float() && std::isfinite(it->get<double>()) &&
                 std::fabs(it->get<double>()) < 9e15) {
        *value = static_cast<int64_t>(std::llround(it->get<double>()));
      } else {
        return error(std::string("\"") + name + "\" is not a number");
      }
      if (*value < min) {
        return error(std::string("\"") + name + "\" is below " + std::to_string(min));
      }
      return OkStatus();
    };
    TraceRequest r;
    KV_RETURN_IF_ERROR(int_field("timestamp", 0, &r.timestamp_ms));
    KV_RETURN_IF_ERROR(int_field("input_length", 1, &r.input_tokens));
    KV_RETURN_IF_ERROR(int_field("output_length", 0, &r.output_tokens));
    auto ids = j.find("hash_ids");
    if (ids == j.end() || !ids->is_array() || ids->empty()) {
      return error("\"hash_ids\" must be a non-empty array");
    }
    r.hash_ids.reserve(ids->size());
    const int64_t max_id = (int64_t{INT32_MAX} - (hash_block_tokens - 1)) / hash_block_tokens;
    for (const auto& id : *ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0) {
        return error("hash ids must be non-negative integers");
      }
      if (id.get<int64_t>() > max_id) {
        return error(StrFormat("hash id %lld too large for int32 token ids at %lld tokens per hash block",
                            static_cast<long long>(id.get<int64_t>()),
                            static_cast<long long>(hash_block_tokens)));
      }
      r.hash_ids.push_back(id.get<int64_t>());
    }
    const int64_t n = static_cast<int64_t>(r.hash_ids.size());
    if (r.input_tokens <= (n - 1) * hash_block_tokens || r.input_tokens > n * hash_block_tokens) {
      return error(StrFormat("input_length %lld does not fit %lld hash blocks of %lld tokens",
                          static_cast<long long>(r.input_tokens), static_cast<long long>(n),
                          static_cast<long long>(hash_block_tokens)));
    }
    out.push_back(std::move(r));
  }
  if (out.empty()) return InvalidArgumentError("the trace has no requests");
  return out;
}

StatusOr<std::vector<TraceRequest>> LoadMooncakeTrace(const std::string& path,
                                                      int64_t hash_block_tokens) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open trace " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  StatusOr<std::vector<TraceRequest>> trace = ParseMooncakeTrace(ss.str(), hash_block_tokens);
  if (!trace.ok()) return trace.status().WithContext(path);
  return trace;
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
  KV_RETURN_IF_ERROR(ValidateOptions(o));
  if (capacity_blocks < 1 || capacity_blocks > kMaxCapacityBlocks) {
    return InvalidArgumentError("capacity out of range");
  }
  const int64_t bs = o.block_tokens;
  // Remember every eviction (at most one per committed prompt block), so that "evicted" and
  // "never seen" misses are told apart exactly.
  int64_t num_prompt_blocks = 0;
  for (const TraceRequest& r : trace) num_prompt_blocks += r.input_tokens / bs;
  KvCacheManager kv({.num_blocks = capacity_blocks,
                     .block_size = bs,
                     .enable_prefix_caching = o.enable_prefix_caching,
                     .eviction_history_size = std::max<int64_t>(1, num_prompt_blocks)});
  SimRow row;
  row.capacity_blocks = capacity_blocks;
  const std::vector<size_t> order = ArrivalOrder(trace);
  struct Finish {
    double time_s;
    SeqId id;
    bool operator>(const Finish& other) const {
      return time_s != other.time_s ? time_s > other.time_s : id > other.id;
    }
  };
  std::priority_queue<Finish, std::vector<Finish>, std::greater<>> finishes;
  std::deque<size_t> waiting;
  int64_t running = 0;
  double total_wait_s = 0.0;
  // The head of the queue did not fit; only a finish (memory returned) can change that.
  bool head_blocked = false;
  std::vector<TokenId> tokens;  // reused: prompts are up to ~10^5 tokens

  auto try_admit = [&](double now_s) {
    while (!waiting.empty() && running < o.max_num_seqs && !head_blocked) {
      const size_t i = waiting.front();
      const TraceRequest& r = trace[i];
      const int64_t total_tokens = r.input_tokens + r.output_tokens;
      if ((total_tokens + bs - 1) / bs > capacity_blocks) {  // can never fit
        ++row.num_rejected;
        waiting.pop_front();
        continue;
      }
      // Cheap necessary condition first: even a hit on every cacheable block leaves this many
      // blocks to allocate.
      if ((total_tokens + bs - 1) / bs - (r.input_tokens - 1) / bs >
          kv.stats().blocks_free + kv.stats().blocks_cached) {
        head_blocked = true;
        return;
      }
      const std::string ns = Namespace(o, i);
      TracePromptTokens(r, o.hash_block_tokens, &tokens);
      const PrefixMatch m = kv.match(ns, tokens);
      if (!kv.can_start(m, total_tokens)) {  // FCFS: the head waits for memory
        head_blocked = true;
        return;
      }
      const SeqId id = static_cast<SeqId>(i);
      kv.start_sequence(id, ns, m);
      KV_CHECK(kv.allocate_slots(id, total_tokens)) << "can_start promised room";
      kv.commit(id, tokens, r.input_tokens);
      waiting.pop_front();
      ++running;
      const double wait_s = now_s - static_cast<double>(r.timestamp_ms) / 1000.0;
      total_wait_s += wait_s;
      row.max_wait_s = std::max(row.max_wait_s, wait_s);
      row.num_delayed += wait_s > 0;
      const double run_s =
          static_cast<double>(r.input_tokens - m.num_cached_tokens) / o.prefill_tokens_per_s +
          static_cast<double>(r.output_tokens) / o.decode_tokens_per_s;
      finishes.push({now_s + run_s, id});
      row.peak_blocks_in_use = std::max(row.peak_blocks_in_use, kv.stats().blocks_in_use);
      if (o.check_invariants) kv.check_invariants();
    }
  };

  constexpr double kInf = std::numeric_limits<double>::infinity();
  size_t next = 0;
  while (next < order.size() || !finishes.empty()) {
    const double arrival_s =
        next < order.size() ? static_cast<double>(trace[order[next]].timestamp_ms) / 1000.0 : kInf;
    const double finish_s = finishes.empty() ? kInf : finishes.top().time_s;
    double now_s;
    if (finish_s <= arrival_s) {  // finishes first: their memory serves the arrival
      now_s = finish_s;
      kv.free(finishes.top().id);
      finishes.pop();
      --running;
      head_blocked = false;
      ++row.num_requests;
      row.end_s = now_s;
    } else {
      now_s = arrival_s;
      waiting.push_back(order[next++]);
    }
    try_admit(now_s);
    if (o.check_invariants) kv.check_invariants();
  }
  KV_CHECK(waiting.empty() && running == 0 && kv.num_sequences() == 0);
  row.stats = kv.stats();
  KV_CHECK_EQ(row.stats.blocks_in_use, 0) << "blocks leaked";
  const int64_t admitted = row.num_requests;
  row.mean_wait_s = admitted > 0 ? total_wait_s / static_cast<double>(admitted) : 0.0;
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
  KV_RETURN_IF_ERROR(ValidateOptions(o));
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

namespace {

const PrefixMissReason kReasonColumns[] = {
    PrefixMissReason::kEvicted, PrefixMissReason::kNeverSeen, PrefixMissReason::kOtherNamespace,
    PrefixMissReason::kPartialBlock, PrefixMissReason::kLastTokenRecomputed};

std::string Percent(double f) { return StrFormat("%.2f%%", 100.0 * f); }

}  // namespace

std::string FormatSimText(const SimReport& rep) {
  const SimOptions& o = rep.options;
  std::string out;
  out += StrFormat(
      "trace %s: %lld requests, %lld prompt tokens (mean %.0f), %lld hash blocks of %lld "
      "tokens (%lld distinct)\n",
      rep.trace_name.c_str(), static_cast<long long>(rep.num_requests),
      static_cast<long long>(rep.num_prompt_tokens), Ratio(rep.num_prompt_tokens, rep.num_requests),
      static_cast<long long>(rep.num_hash_blocks), static_cast<long long>(o.hash_block_tokens),
      static_cast<long long>(rep.num_distinct_hash_ids));
  out += StrFormat(
      "cache: %lld-token blocks, prefix caching %s%s; per request: prefill %.0f tok/s "
      "(uncached), decode %.0f tok/s; at most %lld sequences\n\n",
      static_cast<long long>(o.block_tokens), o.enable_prefix_caching ? "on" : "off",
      o.tenants > 1 ? StrFormat(", %lld tenants (salts)", static_cast<long long>(o.tenants)).c_str()
                    : "",
      o.prefill_tokens_per_s, o.decode_tokens_per_s, static_cast<long long>(o.max_num_seqs));
  out +=
      StrFormat("%10s %12s %8s %8s %10s | %-38s | %7s %8s %8s\n", "capacity", "capacity", "hit", "hit",
             "evicted", "   missed prompt tokens, % of prompt", "delayed", "mean", "peak");
  out += StrFormat("%10s %12s %8s %8s %10s | %7s %7s %7s %7s %7s | %7s %8s %8s\n", "blocks", "tokens",
                "tokens", "blocks", "blocks", "evict", "never", "other", "partial", "last", "reqs",
                "wait_s", "in_use");
  auto line = [&](const SimRow& r) {
    const bool unbounded = r.capacity_blocks < 0;
    std::string s = unbounded ? StrFormat("%10s %12s", "unbounded", "-")
                              : StrFormat("%10lld %12lld", static_cast<long long>(r.capacity_blocks),
                                       static_cast<long long>(r.capacity_blocks * o.block_tokens));
    s += StrFormat(" %8s %8s", Percent(r.token_hit_rate()).c_str(),
                Percent(r.block_hit_rate()).c_str());
    s += unbounded ? StrFormat(" %10s |", "-")
                   : StrFormat(" %10lld |", static_cast<long long>(r.stats.evicted_blocks));
    for (PrefixMissReason reason : kReasonColumns) {
      s += StrFormat(" %6.2f%%", 100.0 * Ratio(r.stats.miss_tokens[static_cast<int>(reason)],
                                            r.stats.prefix_queries_tokens));
    }
    if (unbounded) {
      s += StrFormat(" | %7s %8s %8s\n", "-", "-", "-");
    } else {
      s += StrFormat(" | %7lld %8.1f %8lld\n", static_cast<long long>(r.num_delayed), r.mean_wait_s,
                  static_cast<long long>(r.peak_blocks_in_use));
    }
    return s;
  };
  for (const SimRow& r : rep.rows) out += line(r);
  out += line(rep.unbounded);
  int64_t rejected = 0;
  for (const SimRow& r : rep.rows) rejected += r.num_rejected;
  if (rejected > 0) {
    out += StrFormat("\n%lld requests larger than a whole cache were skipped (summed over rows)\n",
                  static_cast<long long>(rejected));
  }
  out +=
      StrFormat("\nreplayed %lld requests x %zu capacities in %.2f s (%d threads)\n",
             static_cast<long long>(rep.num_requests), rep.rows.size(), rep.elapsed_s, rep.threads);
  return out;
}

std::string FormatSimJson(const SimReport& rep) {
  using ojson = nlohmann::ordered_json;
  const SimOptions& o = rep.options;
  auto row_json = [&](const SimRow& r) {
    ojson misses = ojson::object();
    for (int i = 0; i < kNumPrefixMissReasons; ++i) {
      misses[PrefixMissReasonName(static_cast<PrefixMissReason>(i))] = r.stats.miss_tokens[i];
    }
    const bool unbounded = r.capacity_blocks < 0;
    ojson j = {
        {"capacity_blocks", unbounded ? ojson(nullptr) : ojson(r.capacity_blocks)},
        {"capacity_tokens", unbounded ? ojson(nullptr) : ojson(r.capacity_blocks * o.block_tokens)},
        {"hit_rate_tokens", r.token_hit_rate()},
        {"hit_rate_blocks", r.block_hit_rate()},
        {"prefix_queries_tokens", r.stats.prefix_queries_tokens},
        {"prefix_hits_tokens", r.stats.prefix_hits_tokens},
        {"prefix_queries_blocks", r.stats.prefix_queries_blocks},
        {"prefix_hits_blocks", r.stats.prefix_hits_blocks},
        {"requests_with_hit", r.stats.prefix_hits},
        {"miss_tokens", misses},
        {"num_requests", r.num_requests},
    };
    if (!unbounded) {
      j["evicted_blocks"] = r.stats.evicted_blocks;
      j["num_rejected"] = r.num_rejected;
      j["num_delayed"] = r.num_delayed;
      j["mean_wait_s"] = r.mean_wait_s;
      j["max_wait_s"] = r.max_wait_s;
      j["end_s"] = r.end_s;
      j["peak_blocks_in_use"] = r.peak_blocks_in_use;
      j["blocks_cached_at_end"] = r.stats.blocks_cached;
    }
    return j;
  };
  ojson rows = ojson::array();
  for (const SimRow& r : rep.rows) rows.push_back(row_json(r));
  ojson j = {
      {"trace", rep.trace_name},
      {"num_requests", rep.num_requests},
      {"num_prompt_tokens", rep.num_prompt_tokens},
      {"num_hash_blocks", rep.num_hash_blocks},
      {"num_distinct_hash_ids", rep.num_distinct_hash_ids},
      {"options",
       {{"block_tokens", o.block_tokens},
        {"hash_block_tokens", o.hash_block_tokens},
        {"enable_prefix_caching", o.enable_prefix_caching},
        {"decode_tokens_per_s", o.decode_tokens_per_s},
        {"prefill_tokens_per_s", o.prefill_tokens_per_s},
        {"max_num_seqs", o.max_num_seqs},
        {"tenants", o.tenants}}},
      {"rows", rows},
      {"unbounded", row_json(rep.unbounded)},
      {"elapsed_s", rep.elapsed_s},
  };
  return j.dump(2) + "\n";
}

int RunSimCommand(const SimOptions& o) {
  if (o.trace_path.empty()) return ReportError(InvalidArgumentError("--trace FILE is required"));
  Status valid = ValidateOptions(o);
  if (!valid.ok()) return ReportError(valid);
  StatusOr<std::vector<TraceRequest>> trace = LoadMooncakeTrace(o.trace_path, o.hash_block_tokens);
  if (!trace.ok()) return ReportError(trace.status());
  StatusOr<SimReport> rep = RunSim(*trace, o);
  if (!rep.ok()) return ReportError(rep.status());
  const size_t slash = o.trace_path.find_last_of('/');
  rep->trace_name = slash == std::string::npos ? o.trace_path : o.trace_path.substr(slash + 1);
  const std::string text = o.format == "json" ? FormatSimJson(*rep) : FormatSimText(*rep);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

void AddSimCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<SimOptions>();
  CLI::App* cmd = app.add_subcommand(
      "sim",
      "Replay a request trace (Mooncake JSONL with hash_ids) through the KV cache manager and "
      "radix prefix cache, without a model, and report prefix hit rates, evictions and miss "
      "reasons for a range of cache capacities, beside an unbounded cache.");
  cmd->add_option("--trace", opts->trace_path, "Trace file (Mooncake JSONL)")->required();
  cmd->add_option("--block-tokens,--block-size", opts->block_tokens, "Tokens per KV block")
      ->capture_default_str();
  cmd->add_option("--hash-block-tokens", opts->hash_block_tokens,
                  "Tokens per trace hash id (Mooncake traces: 512)")
      ->capture_default_str();
  cmd->add_option("--kv-cache-blocks", opts->capacities_blocks,
                  "Cache capacities to replay, in blocks (comma-separated or repeated; default: "
                  "the equivalent of 1k,2k,5k,10k,20k,50k,100k blocks of 512 tokens)")
      ->delimiter(',');
  cmd->add_option("--decode-tokens-per-s", opts->decode_tokens_per_s,
                  "Decode speed of one request (sets how long it holds its blocks)")
      ->capture_default_str();
  cmd->add_option("--prefill-tokens-per-s", opts->prefill_tokens_per_s,
                  "Prefill speed of one request over its uncached prompt tokens")
      ->capture_default_str();
  cmd->add_option("--max-num-seqs", opts->max_num_seqs, "Requests running at once")
      ->capture_default_str();
  cmd->add_option("--max-requests", opts->max_requests, "Replay only the first N requests (0: all)")
      ->capture_default_str();
  cmd->add_option("--tenants", opts->tenants,
                  "Give request i the cache salt i % N (tenants never share blocks)")
      ->capture_default_str();
  cmd->add_option("--threads", opts->threads,
                  "Capacities replayed in parallel (0: one thread per core)")
      ->capture_default_str();
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", opts->enable_prefix_caching,
                "Reuse cached prefix blocks (default: on)");
  cmd->add_option("--format,--output-format", opts->format, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_flag("--check-invariants", opts->check_invariants,
                "Check the cache manager's invariants after every event (slow)")
      ->group("");
  cmd->callback([opts, exit_code]() { *exit_code = RunSimCommand(*opts); });
}

}  // namespace kvserve::cli

#include "sim/fleet.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <span>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "base/hash.h"
#include "base/str_format.h"
#include "kv/radix_cache.h"
#include "sim/replica.h"

namespace kvserve::sim {
namespace {

constexpr Routing kRoutings[] = {Routing::kRoundRobin, Routing::kLeastLoaded,
                                 Routing::kPrefixAffinity, Routing::kKvEvents};

// The blocks a router following one replica's KV events believes it holds.
using BlockSet = std::unordered_set<uint64_t>;

void Follow(std::vector<KvCacheEvent> events, BlockSet* blocks) {
  for (const KvCacheEvent& e : events) {
    switch (e.kind) {
      case KvCacheEvent::Kind::kBlockStored:
        blocks->insert(e.block_hashes.begin(), e.block_hashes.end());
        break;
      case KvCacheEvent::Kind::kBlockRemoved:
        for (uint64_t h : e.block_hashes) blocks->erase(h);
        break;
      case KvCacheEvent::Kind::kAllBlocksCleared:
        blocks->clear();
        break;
    }
  }
}

}  // namespace

const char* RoutingName(Routing routing) {
  switch (routing) {
    case Routing::kRoundRobin: return "round-robin";
    case Routing::kLeastLoaded: return "least-loaded";
    case Routing::kPrefixAffinity: return "prefix-affinity";
    case Routing::kKvEvents: return "kv-events";
  }
  return "?";
}

StatusOr<Routing> ParseRouting(const std::string& name) {
  for (Routing r : kRoutings) {
    if (name == RoutingName(r)) return r;
  }
  return InvalidArgumentError("--routing '" + name +
                              "': use round-robin, least-loaded, prefix-affinity, kv-events or all");
}

std::vector<Routing> AllRoutings() { return {std::begin(kRoutings), std::end(kRoutings)}; }

StatusOr<FleetRow> SimulateFleet(const std::vector<TraceRequest>& trace, const SimOptions& o,
                                 int64_t capacity_blocks, const FleetOptions& fo) {
  KV_RETURN_IF_ERROR(ValidateSimOptions(o));
  const int64_t replicas = fo.replicas;
  const Routing routing = fo.routing;
  if (replicas < 1 || replicas > 1024) return InvalidArgumentError("--replicas must be in [1, 1024]");
  if (fo.affinity_tokens < 1) return InvalidArgumentError("--affinity-tokens must be at least 1");
  const auto start = std::chrono::steady_clock::now();
  const bool follow_events = routing == Routing::kKvEvents;
  std::vector<std::unique_ptr<ReplicaSim>> fleet;
  for (int64_t k = 0; k < replicas; ++k) {
    auto r = ReplicaSim::Create(trace, o, capacity_blocks, follow_events);
    if (!r.ok()) return r.status();
    fleet.push_back(std::move(r).value());
  }
  std::vector<BlockSet> known(static_cast<size_t>(replicas));  // kv-events: per replica
  FleetRow out;
  out.routing = routing;
  out.replicas = replicas;
  out.requests_per_replica.assign(static_cast<size_t>(replicas), 0);
  const int64_t bs = o.block_tokens;
  auto least_loaded = [&](const std::vector<size_t>& candidates) {
    size_t best = candidates.front();
    for (size_t k : candidates) {
      if (fleet[k]->load() < fleet[best]->load()) best = k;
    }
    return best;
  };
  std::vector<size_t> everyone(static_cast<size_t>(replicas));
  for (size_t k = 0; k < everyone.size(); ++k) everyone[k] = k;
  std::vector<TokenId> prompt;
  auto route = [&](size_t i, size_t arrival_index) -> size_t {
    const TraceRequest& r = trace[i];
    const std::string salt = o.tenants > 1 ? std::to_string(i % static_cast<size_t>(o.tenants)) : "";
    switch (routing) {
      case Routing::kRoundRobin:
        return arrival_index % static_cast<size_t>(replicas);
      case Routing::kLeastLoaded:
        return least_loaded(everyone);
      case Routing::kPrefixAffinity: {
        TracePromptTokens(r, o.hash_block_tokens, &prompt);
        const size_t n = std::min<size_t>(prompt.size(), static_cast<size_t>(fo.affinity_tokens));
        const uint64_t h = HashCombine(std::hash<std::string>()(salt),
                                       HashBlockTokens(std::span<const TokenId>(prompt).first(n)));
        return static_cast<size_t>(h % static_cast<uint64_t>(replicas));
      }
      case Routing::kKvEvents: {
        // The request's block hashes as the replicas' caches key them (kv/kv_events.h).
        TracePromptTokens(r, o.hash_block_tokens, &prompt);
        const uint64_t ns_key = NamespaceKey(CacheNamespace("sim", salt));
        uint64_t chain = kPrefixChainSeed;
        std::vector<size_t> best;
        int64_t best_blocks = -1;
        std::vector<int64_t> matched(static_cast<size_t>(replicas), 0);
        std::vector<uint8_t> alive(static_cast<size_t>(replicas), 1);
        for (int64_t j = 0; (j + 1) * bs <= static_cast<int64_t>(prompt.size()); ++j) {
          chain = ExtendPrefixChain(
              chain, std::span<const TokenId>(prompt).subspan(static_cast<size_t>(j * bs),
                                                              static_cast<size_t>(bs)));
          const uint64_t key = PrefixBlockKey(ns_key, chain);
          bool any = false;
          for (size_t k = 0; k < known.size(); ++k) {
            if (alive[k] && known[k].count(key)) {
              ++matched[k];
              any = true;
            } else {
              alive[k] = 0;
            }
          }
          if (!any) break;
        }
        for (size_t k = 0; k < known.size(); ++k) {
          if (matched[k] > best_blocks) {
            best_blocks = matched[k];
            best.assign(1, k);
          } else if (matched[k] == best_blocks) {
            best.push_back(k);
          }
        }
        return least_loaded(best);
      }
    }
    return 0;
  };

  const std::vector<size_t> order = ArrivalOrder(trace);
  size_t next = 0;
  while (true) {
    const double t_arrival = next < order.size() ? ArrivalSeconds(trace[order[next]])
                                                 : std::numeric_limits<double>::infinity();
    // The busy replica furthest behind steps first, while it is behind the next arrival.
    ReplicaSim* laggard = nullptr;
    size_t laggard_k = 0;
    for (size_t k = 0; k < fleet.size(); ++k) {
      if (fleet[k]->busy() && (laggard == nullptr || fleet[k]->now_s() < laggard->now_s())) {
        laggard = fleet[k].get();
        laggard_k = k;
      }
    }
    if (laggard != nullptr && laggard->now_s() < t_arrival) {
      KV_RETURN_IF_ERROR(laggard->Step());
      if (follow_events) Follow(laggard->kv().take_events(), &known[laggard_k]);
      continue;
    }
    if (next == order.size()) break;  // nothing busy, nothing left to arrive
    const size_t i = order[next];
    const size_t k = route(i, next);
    ++next;
    ReplicaSim& target = *fleet[k];
    if (!target.busy()) target.AdvanceTo(t_arrival);
    target.Add(i);
    ++out.requests_per_replica[k];
  }

  std::vector<double> queue_s, ttft_s;
  SimRow& f = out.fleet;
  f.capacity_blocks = capacity_blocks;
  for (auto& replica : fleet) {
    const SimRow r = replica->Finish();
    out.hit_rate_per_replica.push_back(r.token_hit_rate());
    KvCacheManagerStats& s = f.stats;
    s.num_blocks += r.stats.num_blocks;
    s.blocks_cached += r.stats.blocks_cached;
    s.blocks_free += r.stats.blocks_free;
    s.blocks_in_prefix_cache += r.stats.blocks_in_prefix_cache;
    s.prefix_queries += r.stats.prefix_queries;
    s.prefix_hits += r.stats.prefix_hits;
    s.prefix_queries_tokens += r.stats.prefix_queries_tokens;
    s.prefix_hits_tokens += r.stats.prefix_hits_tokens;
    s.prefix_queries_blocks += r.stats.prefix_queries_blocks;
    s.prefix_hits_blocks += r.stats.prefix_hits_blocks;
    s.evicted_blocks += r.stats.evicted_blocks;
    for (int m = 0; m < kNumPrefixMissReasons; ++m) s.miss_tokens[m] += r.stats.miss_tokens[m];
    f.num_requests += r.num_requests;
    f.num_rejected += r.num_rejected;
    f.num_clipped += r.num_clipped;
    f.max_model_len = r.max_model_len;
    f.max_num_batched_tokens = r.max_num_batched_tokens;
    f.num_preemptions += r.num_preemptions;
    f.readmit_queries_tokens += r.readmit_queries_tokens;
    f.readmit_hits_tokens += r.readmit_hits_tokens;
    f.num_steps += r.num_steps;
    f.num_prefill_tokens += r.num_prefill_tokens;
    f.num_decode_tokens += r.num_decode_tokens;
    f.end_s = std::max(f.end_s, r.end_s);
    f.peak_blocks_in_use = std::max(f.peak_blocks_in_use, r.peak_blocks_in_use);
    queue_s.insert(queue_s.end(), replica->queue_s().begin(), replica->queue_s().end());
    ttft_s.insert(ttft_s.end(), replica->ttft_s().begin(), replica->ttft_s().end());
  }
  KV_CHECK_EQ(f.num_requests + f.num_rejected, static_cast<int64_t>(trace.size()));
  SummarizeLatencies(queue_s, ttft_s, &f);
  out.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  f.elapsed_s = out.elapsed_s;
  return out;
}

std::string FormatFleetText(const std::vector<FleetRow>& rows, const SimReport& rep) {
  const SimOptions& o = rep.options;
  std::string out = StrFormat(
      "trace %s: %lld requests, %lld prompt tokens; %lld replicas of %lld blocks x %lld tokens; "
      "step %.1f ms + prefill tokens / %.0f tok/s\n\n",
      rep.trace_name.c_str(), static_cast<long long>(rep.num_requests),
      static_cast<long long>(rep.num_prompt_tokens),
      static_cast<long long>(rows.empty() ? 0 : rows.front().replicas),
      static_cast<long long>(rows.empty() ? 0 : rows.front().fleet.capacity_blocks),
      static_cast<long long>(o.block_tokens), 1000.0 / o.decode_tokens_per_s,
      o.prefill_tokens_per_s);
  out += "| routing | fleet hit rate (tokens) | requests per replica (min / max) | queue mean / p99 (s) | TTFT mean / p99 (s) | preemptions | evicted blocks |\n";
  out += "|---|---|---|---|---|---|---|\n";
  for (const FleetRow& r : rows) {
    const auto [mn, mx] = std::minmax_element(r.requests_per_replica.begin(), r.requests_per_replica.end());
    out += StrFormat("| %s | %.1f%% | %lld / %lld | %.2f / %.2f | %.2f / %.2f | %lld | %lld |\n",
                     RoutingName(r.routing), 100.0 * r.fleet.token_hit_rate(),
                     static_cast<long long>(*mn), static_cast<long long>(*mx),
                     r.fleet.mean_queue_s, r.fleet.p99_queue_s, r.fleet.mean_ttft_s,
                     r.fleet.p99_ttft_s, static_cast<long long>(r.fleet.num_preemptions),
                     static_cast<long long>(r.fleet.stats.evicted_blocks));
  }
  return out;
}

std::string FormatFleetJson(const std::vector<FleetRow>& rows, const SimReport& rep) {
  using ojson = nlohmann::ordered_json;
  ojson list = ojson::array();
  for (const FleetRow& r : rows) {
    list.push_back({{"routing", RoutingName(r.routing)},
                    {"replicas", r.replicas},
                    {"capacity_blocks_per_replica", r.fleet.capacity_blocks},
                    {"hit_rate_tokens", r.fleet.token_hit_rate()},
                    {"hit_rate_blocks", r.fleet.block_hit_rate()},
                    {"prefix_queries_tokens", r.fleet.stats.prefix_queries_tokens},
                    {"prefix_hits_tokens", r.fleet.stats.prefix_hits_tokens},
                    {"requests_per_replica", r.requests_per_replica},
                    {"hit_rate_per_replica", r.hit_rate_per_replica},
                    {"num_requests", r.fleet.num_requests},
                    {"num_rejected", r.fleet.num_rejected},
                    {"num_preemptions", r.fleet.num_preemptions},
                    {"evicted_blocks", r.fleet.stats.evicted_blocks},
                    {"mean_queue_s", r.fleet.mean_queue_s},
                    {"p99_queue_s", r.fleet.p99_queue_s},
                    {"mean_ttft_s", r.fleet.mean_ttft_s},
                    {"p99_ttft_s", r.fleet.p99_ttft_s},
                    {"end_s", r.fleet.end_s},
                    {"elapsed_s", r.elapsed_s}});
  }
  return ojson({{"trace", rep.trace_name},
                {"num_requests", rep.num_requests},
                {"block_tokens", rep.options.block_tokens},
                {"fleet", list}})
             .dump(2) + "\n";
}

}  // namespace kvserve::sim

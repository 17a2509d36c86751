// SLO search (see slo_search.h).
#include "sim/slo_search.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/str_format.h"
#include "loadgen/metrics.h"

namespace kvserve::sim {
namespace {

using nlohmann::json;

struct Config {
  std::string kv_cache_dtype;
  int64_t block_size = 16;
  int64_t max_num_seqs = 0;
  int64_t max_num_batched_tokens = 0;
  bool chunked_prefill = true;
  int64_t kv_budget_tokens = 0;
};

std::vector<Config> Grid(const SearchSpace& s) {
  std::vector<Config> grid;
  for (const std::string& dtype : s.kv_cache_dtypes) {
    for (int64_t block : s.block_sizes) {
      for (int64_t seqs : s.max_num_seqs) {
        for (int64_t tokens : s.max_num_batched_tokens) {
          for (bool chunked : s.chunked_prefill) {
            for (int64_t budget : s.kv_budgets) {
              grid.push_back({dtype, block, seqs, tokens, chunked, budget});
            }
          }
        }
      }
    }
  }
  return grid;
}

// Requests i = r (mod n) of `w`.
ServingWorkload Share(const ServingWorkload& w, int64_t r, int64_t n) {
  ServingWorkload s;
  s.dataset_name = w.dataset_name;
  for (size_t i = static_cast<size_t>(r); i < w.prompts.size(); i += static_cast<size_t>(n)) {
    s.prompts.push_back(w.prompts[i]);
    s.output_tokens.push_back(w.output_tokens[i]);
    s.arrival_s.push_back(w.arrival_s[i]);
  }
  return s;
}

std::string ServeCommand(const SearchOptions& o, const Config& c, DType dtype) {
  std::string model = !o.engine.model_path.empty() ? o.engine.model_path
                                                   : "<" + o.engine.preset + " GGUF>";
  std::string cmd = StrFormat(
      "kvserve serve --model %s --kv-cache-dtype %s --block-size %lld --max-num-seqs %lld "
      "--max-num-batched-tokens %lld",
      model.c_str(), DTypeName(dtype), static_cast<long long>(c.block_size),
      static_cast<long long>(c.max_num_seqs), static_cast<long long>(c.max_num_batched_tokens));
  if (!c.chunked_prefill) cmd += " --no-enable-chunked-prefill";
  if (c.kv_budget_tokens > 0) {
    cmd += StrFormat(" --kv-eviction snapkv --kv-budget %lld",
                     static_cast<long long>(c.kv_budget_tokens));
  }
  return cmd;
}

StatusOr<SearchCandidate> Evaluate(const ServingWorkload& w, const SearchOptions& o,
                                   const Config& c, int64_t replicas) {
  EngineSetup setup = o.engine;
  setup.kv_cache_dtype = c.kv_cache_dtype;
  setup.block_size = c.block_size;
  KV_ASSIGN_OR_RETURN(const Engine engine, ResolveEngine(setup));
  SimOptions so;
  so.block_tokens = c.block_size;
  so.deployment = engine.deployment;
  so.scheduler.max_num_seqs = c.max_num_seqs;
  so.scheduler.max_num_batched_tokens = c.chunked_prefill ? c.max_num_batched_tokens : 0;
  so.scheduler.enable_chunked_prefill = c.chunked_prefill;
  if (c.kv_budget_tokens > 0) {
    so.kv_policy.method = KvEvictionMethod::kSnapKv;
    so.kv_policy.budget_tokens = c.kv_budget_tokens;
  }
  so.threads = 1;
  ServingOptions serving;
  serving.capacity_blocks = engine.capacity_blocks;
  serving.max_concurrency = o.max_concurrency;
  loadgen::BenchmarkResult pooled;
  SearchCandidate k;
  for (int64_t r = 0; r < replicas; ++r) {
    KV_ASSIGN_OR_RETURN(ServingResult one, SimulateServing(Share(w, r, replicas), so, serving));
    pooled.duration_s = std::max(pooled.duration_s, one.bench.duration_s);
    for (loadgen::RequestResult& q : one.bench.requests) pooled.requests.push_back(std::move(q));
    k.num_preemptions += one.row.num_preemptions;
  }
  const loadgen::BenchmarkSummary s = loadgen::Summarize(pooled);
  k.kv_cache_dtype = DTypeName(engine.deployment.kv.dtype);
  k.block_size = c.block_size;
  k.max_num_seqs = c.max_num_seqs;
  k.max_num_batched_tokens = c.max_num_batched_tokens;
  k.chunked_prefill = c.chunked_prefill;
  k.kv_budget_tokens = c.kv_budget_tokens;
  k.replicas = replicas;
  k.tensor_parallel = engine.deployment.tensor_parallel;
  k.capacity_blocks = engine.capacity_blocks;
  k.num_failed = s.num_failed;
  k.ttft_p90_ms = s.ttft.p90_ms;
  k.tpot_p99_ms = s.tpot.p99_ms;
  k.output_tokens_per_s = s.output_throughput_tokens_per_s;
  k.duration_s = s.duration_s;
  const double devices = static_cast<double>(replicas * k.tensor_parallel);
  const double dollars = devices * engine.deployment.hardware.price_per_hour * s.duration_s / 3600.0;
  k.cost_per_million_output_tokens =
      s.total_output_tokens > 0 ? dollars / static_cast<double>(s.total_output_tokens) * 1e6 : 0.0;
  if (k.num_failed > 0) {
    k.verdict = StrFormat("%lld requests rejected (longer than the cache holds)",
                          static_cast<long long>(k.num_failed));
  } else if (k.ttft_p90_ms > o.slo_ttft_p90_ms) {
    k.verdict = StrFormat("TTFT p90 %.0f ms > %.0f ms", k.ttft_p90_ms, o.slo_ttft_p90_ms);
  } else if (k.tpot_p99_ms > o.slo_tpot_p99_ms) {
    k.verdict = StrFormat("TPOT p99 %.0f ms > %.0f ms", k.tpot_p99_ms, o.slo_tpot_p99_ms);
  } else {
    k.meets = true;
    k.verdict = "meets";
  }
  k.serve_command = ServeCommand(o, c, engine.deployment.kv.dtype);
  return k;
}

// Cheapest first; equal costs: the lower TTFT p90.
bool Cheaper(const SearchCandidate& a, const SearchCandidate& b) {
  if (a.cost_per_million_output_tokens != b.cost_per_million_output_tokens) {
    return a.cost_per_million_output_tokens < b.cost_per_million_output_tokens;
  }
  return a.ttft_p90_ms < b.ttft_p90_ms;
}

// Candidates within this fraction of the cheapest cost the same: replays at one replica count
// differ only in when their last request finishes.
constexpr double kCostTolerance = 0.01;

std::string Flags(const SearchCandidate& k) {
  return StrFormat("%s KV, %lld-token blocks, %lld seqs, %lld tokens/step%s%s", k.kv_cache_dtype.c_str(),
                   static_cast<long long>(k.block_size), static_cast<long long>(k.max_num_seqs),
                   static_cast<long long>(k.max_num_batched_tokens),
                   k.chunked_prefill ? "" : ", no chunked prefill",
                   k.kv_budget_tokens > 0
                       ? StrFormat(", snapkv %lld", static_cast<long long>(k.kv_budget_tokens)).c_str()
                       : "");
}

}  // namespace

StatusOr<SearchResult> SearchConfigurations(const ServingWorkload& w, const SearchOptions& o) {
  if (!(o.slo_ttft_p90_ms > 0) || !(o.slo_tpot_p99_ms > 0)) {
    return InvalidArgumentError("--slo-ttft-p90 and --slo-tpot-p99 must be > 0 (milliseconds)");
  }
  if (w.prompts.empty()) return InvalidArgumentError("--search: the workload has no request");
  const std::vector<Config> grid = Grid(o.space);
  if (grid.empty()) return InvalidArgumentError("--search: the grid of configurations is empty");
  if (o.space.max_replicas < 1) return InvalidArgumentError("--max-replicas must be >= 1");
  SearchResult result;
  {
    EngineSetup first = o.engine;
    first.kv_cache_dtype = grid[0].kv_cache_dtype;
    first.block_size = grid[0].block_size;
    KV_ASSIGN_OR_RETURN(const Engine engine, ResolveEngine(first));
    result.engine_description = engine.Describe();
  }
  const int threads = o.threads > 0 ? o.threads
                                    : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<SearchCandidate> previous;  // the last replica count's (all missed)
  for (int64_t replicas = 1; replicas <= o.space.max_replicas; ++replicas) {
    std::vector<StatusOr<SearchCandidate>> done(grid.size(), InternalError("not run"));
    std::atomic<size_t> next{0};
    std::atomic<int64_t> finished{0};
    std::mutex progress_mu;
    auto work = [&] {
      for (size_t i = next++; i < grid.size(); i = next++) {
        done[i] = Evaluate(w, o, grid[i], replicas);
        const int64_t n = ++finished;
        if (o.progress) {
          std::lock_guard<std::mutex> lock(progress_mu);
          o.progress(replicas, n, static_cast<int64_t>(grid.size()));
        }
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < std::min<int>(threads, static_cast<int>(grid.size())); ++t) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
    std::vector<SearchCandidate> round;
    for (StatusOr<SearchCandidate>& c : done) {
      if (!c.ok()) return c.status();
      round.push_back(std::move(c).value());
    }
    const bool any = std::any_of(round.begin(), round.end(),
                                 [](const SearchCandidate& c) { return c.meets; });
    if (!any && replicas < o.space.max_replicas) {
      previous = std::move(round);
      continue;
    }
    for (SearchCandidate& c : previous) result.candidates.push_back(std::move(c));
    for (SearchCandidate& c : round) result.candidates.push_back(std::move(c));
    break;
  }
  std::stable_sort(result.candidates.begin(), result.candidates.end(), Cheaper);
  for (size_t i = 0; i < result.candidates.size(); ++i) {
    const SearchCandidate& c = result.candidates[i];
    if (c.meets && result.chosen < 0) result.chosen = static_cast<int>(i);
    if (!c.meets && result.cheapest_miss < 0) result.cheapest_miss = static_cast<int>(i);
  }
  // Among those that meet the targets within kCostTolerance of the cheapest, prefer no token
  // eviction (it changes outputs), then the lower TTFT p90.
  if (result.chosen >= 0) {
    const double limit =
        result.candidates[static_cast<size_t>(result.chosen)].cost_per_million_output_tokens *
        (1 + kCostTolerance);
    for (size_t i = 0; i < result.candidates.size(); ++i) {
      const SearchCandidate& c = result.candidates[i];
      if (!c.meets || c.cost_per_million_output_tokens > limit) continue;
      const SearchCandidate& best = result.candidates[static_cast<size_t>(result.chosen)];
      const bool fewer_evictions = (c.kv_budget_tokens == 0) && (best.kv_budget_tokens > 0);
      const bool same_evictions = (c.kv_budget_tokens == 0) == (best.kv_budget_tokens == 0);
      if (fewer_evictions || (same_evictions && c.ttft_p90_ms < best.ttft_p90_ms)) {
        result.chosen = static_cast<int>(i);
      }
    }
  }
  return result;
}

std::string FormatSearchText(const SearchResult& r, const SearchOptions& o) {
  std::string out = StrFormat("targets: TTFT p90 <= %.0f ms, TPOT p99 <= %.0f ms; %s\n",
                              o.slo_ttft_p90_ms, o.slo_tpot_p99_ms, r.engine_description.c_str());
  const auto line = [](const SearchCandidate& k) {
    return StrFormat("%lld x %d device(s), %s: TTFT p90 %.0f ms, TPOT p99 %.1f ms, %.0f output "
                     "tok/s, %lld preemptions, $%.3f per million output tokens (%s)\n",
                     static_cast<long long>(k.replicas), k.tensor_parallel, Flags(k).c_str(),
                     k.ttft_p90_ms, k.tpot_p99_ms, k.output_tokens_per_s,
                     static_cast<long long>(k.num_preemptions), k.cost_per_million_output_tokens,
                     k.verdict.c_str());
  };
  if (r.chosen >= 0) {
    const SearchCandidate& k = r.candidates[static_cast<size_t>(r.chosen)];
    out += "\nchosen: " + line(k);
    out += StrFormat("  %s   # on each of %lld replicas\n", k.serve_command.c_str(),
                     static_cast<long long>(k.replicas));
    out += "\nrunners-up:\n";
    int shown = 0;
    for (size_t i = 0; i < r.candidates.size() && shown < 5; ++i) {
      if (static_cast<int>(i) == r.chosen || !r.candidates[i].meets) continue;
      out += "  " + line(r.candidates[i]);
      ++shown;
    }
    if (shown == 0) out += "  (none)\n";
  } else {
    out += StrFormat("\nno configuration meets the targets with up to %lld replicas\n",
                     static_cast<long long>(o.space.max_replicas));
  }
  if (r.cheapest_miss >= 0) {
    out += "\ncheapest that misses: " + line(r.candidates[static_cast<size_t>(r.cheapest_miss)]);
  }
  std::vector<int64_t> counts;
  for (const SearchCandidate& c : r.candidates) {
    if (std::find(counts.begin(), counts.end(), c.replicas) == counts.end()) counts.push_back(c.replicas);
  }
  std::sort(counts.begin(), counts.end());
  std::string listed;
  for (int64_t n : counts) listed += (listed.empty() ? "" : ", ") + std::to_string(n);
  out += StrFormat("\n%zu candidates listed, at %s replica(s); every configuration on fewer "
                   "replicas missed the targets\n",
                   r.candidates.size(), listed.c_str());
  return out;
}

std::string FormatSearchJson(const SearchResult& r, const SearchOptions& o) {
  json candidates = json::array();
  for (const SearchCandidate& k : r.candidates) {
    candidates.push_back({{"kv_cache_dtype", k.kv_cache_dtype},
                          {"block_size", k.block_size},
                          {"max_num_seqs", k.max_num_seqs},
                          {"max_num_batched_tokens", k.max_num_batched_tokens},
                          {"enable_chunked_prefill", k.chunked_prefill},
                          {"kv_budget_tokens", k.kv_budget_tokens},
                          {"replicas", k.replicas},
                          {"tensor_parallel", k.tensor_parallel},
                          {"capacity_blocks", k.capacity_blocks},
                          {"meets", k.meets},
                          {"verdict", k.verdict},
                          {"ttft_p90_ms", k.ttft_p90_ms},
                          {"tpot_p99_ms", k.tpot_p99_ms},
                          {"output_tokens_per_s", k.output_tokens_per_s},
                          {"num_preemptions", k.num_preemptions},
                          {"num_failed", k.num_failed},
                          {"duration_s", k.duration_s},
                          {"cost_per_million_output_tokens", k.cost_per_million_output_tokens},
                          {"serve_command", k.serve_command}});
  }
  const json j = {{"slo_ttft_p90_ms", o.slo_ttft_p90_ms},
                  {"slo_tpot_p99_ms", o.slo_tpot_p99_ms},
                  {"engine", r.engine_description},
                  {"chosen", r.chosen},
                  {"cheapest_miss", r.cheapest_miss},
                  {"candidates", candidates}};
  return j.dump(2) + "\n";
}

}  // namespace kvserve::sim

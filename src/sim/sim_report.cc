// `kvserve sim`: the report, as text (a table) or JSON (see sim.h).
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "base/str_format.h"
#include "plot/svg_chart.h"
#include "sim/sim.h"

namespace kvserve::sim {
namespace {

// part / whole, 0 for an empty whole.
double Ratio(int64_t part, int64_t whole) {
  return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

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
  int64_t max_model_len = 0;
  int64_t budget = o.scheduler.max_num_batched_tokens;  // as resolved: the largest row's
  bool capped = false;
  for (const SimRow& r : rep.rows) {
    capped |= max_model_len > 0 && r.max_model_len != max_model_len;
    max_model_len = std::max(max_model_len, r.max_model_len);
    budget = std::max(budget, r.max_num_batched_tokens);
  }
  out += StrFormat(
      "cache: %lld-token blocks, prefix caching %s%s\n", static_cast<long long>(o.block_tokens),
      o.scheduler.enable_prefix_caching ? "on" : "off",
      o.tenants > 1 ? StrFormat(", %lld tenants (salts)", static_cast<long long>(o.tenants)).c_str()
                    : "");
  out += StrFormat(
      "engine: step %.1f ms + prefill tokens / %.0f tok/s; scheduler: %lld tokens and %lld "
      "sequences per step, chunked prefill %s%s, max model len %lld%s\n\n",
      1000.0 / o.decode_tokens_per_s, o.prefill_tokens_per_s,
      static_cast<long long>(budget), static_cast<long long>(o.scheduler.max_num_seqs),
      o.scheduler.enable_chunked_prefill ? "on" : "off",
      o.scheduler.long_prefill_token_threshold > 0
          ? StrFormat(" (at most %lld tokens per request)",
                      static_cast<long long>(o.scheduler.long_prefill_token_threshold))
                .c_str()
          : "",
      static_cast<long long>(max_model_len), capped ? " (smaller in smaller caches)" : "");
  out += StrFormat("%10s %12s %8s %8s %10s | %-38s | %7s %8s %8s %8s %8s\n", "capacity",
                   "capacity", "hit", "hit", "evicted", "   missed prompt tokens, % of prompt",
                   "preempt", "recomp", "queue", "ttft", "peak");
  out += StrFormat("%10s %12s %8s %8s %10s | %7s %7s %7s %7s %7s | %7s %8s %8s %8s %8s\n",
                   "blocks", "tokens", "tokens", "blocks", "blocks", "evict", "never", "other",
                   "partial", "last", "count", "% prompt", "mean_s", "p99_s", "in_use");
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
      s += StrFormat(" | %7s %8s %8s %8s %8s\n", "-", "-", "-", "-", "-");
    } else {
      s += StrFormat(" | %7lld %7.2f%% %8.2f %8.2f %8lld\n",
                     static_cast<long long>(r.num_preemptions),
                     100.0 * Ratio(r.readmit_queries_tokens - r.readmit_hits_tokens,
                                   r.stats.prefix_queries_tokens),
                     r.mean_queue_s, r.p99_ttft_s, static_cast<long long>(r.peak_blocks_in_use));
    }
    return s;
  };
  for (const SimRow& r : rep.rows) out += line(r);
  out += line(rep.unbounded);
  int64_t rejected = 0, clipped = 0;
  for (const SimRow& r : rep.rows) {
    rejected += r.num_rejected;
    clipped += r.num_clipped;
  }
  if (rejected > 0) {
    out += StrFormat(
        "\n%lld requests with prompts of max model len or more were rejected (summed over rows)\n",
        static_cast<long long>(rejected));
  }
  if (clipped > 0) {
    out += StrFormat("\n%lld requests had their output cut at max model len (summed over rows)\n",
                     static_cast<long long>(clipped));
  }
  out +=
      StrFormat("\nreplayed %lld requests x %zu capacities in %.2f s (%d threads)\n",
             static_cast<long long>(rep.num_requests), rep.rows.size(), rep.elapsed_s, rep.threads);
  if (!rep.rows.empty()) {
    out += "wall time per capacity:";
    for (const SimRow& r : rep.rows) {
      out += StrFormat(" %lld: %.2f s,", static_cast<long long>(r.capacity_blocks), r.elapsed_s);
    }
    out.back() = '\n';
    out += "simulated time (last finish):";
    for (const SimRow& r : rep.rows) {
      out += StrFormat(" %lld: %.0f s,", static_cast<long long>(r.capacity_blocks), r.end_s);
    }
    out.back() = '\n';
  }
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
      j["num_clipped"] = r.num_clipped;
      j["max_model_len"] = r.max_model_len;
      j["max_num_batched_tokens"] = r.max_num_batched_tokens;
      j["num_preemptions"] = r.num_preemptions;
      j["readmit_queries_tokens"] = r.readmit_queries_tokens;
      j["readmit_hits_tokens"] = r.readmit_hits_tokens;
      j["num_steps"] = r.num_steps;
      j["num_prefill_tokens"] = r.num_prefill_tokens;
      j["num_decode_tokens"] = r.num_decode_tokens;
      j["mean_queue_s"] = r.mean_queue_s;
      j["p99_queue_s"] = r.p99_queue_s;
      j["max_queue_s"] = r.max_queue_s;
      j["mean_ttft_s"] = r.mean_ttft_s;
      j["p99_ttft_s"] = r.p99_ttft_s;
      j["end_s"] = r.end_s;
      j["peak_blocks_in_use"] = r.peak_blocks_in_use;
      j["blocks_cached_at_end"] = r.stats.blocks_cached;
      j["elapsed_s"] = r.elapsed_s;
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
        {"enable_prefix_caching", o.scheduler.enable_prefix_caching},
        {"decode_tokens_per_s", o.decode_tokens_per_s},
        {"prefill_tokens_per_s", o.prefill_tokens_per_s},
        {"max_num_batched_tokens", o.scheduler.max_num_batched_tokens},
        {"max_num_seqs", o.scheduler.max_num_seqs},
        {"max_model_len", o.max_model_len},
        {"enable_chunked_prefill", o.scheduler.enable_chunked_prefill},
        {"long_prefill_token_threshold", o.scheduler.long_prefill_token_threshold},
        {"scheduling_policy",
         o.scheduler.policy == SchedulingPolicy::kPriority ? "priority" : "fcfs"},
        {"tenants", o.tenants}}},
      {"rows", rows},
      {"unbounded", row_json(rep.unbounded)},
      {"elapsed_s", rep.elapsed_s},
  };
  return j.dump(2) + "\n";
}

std::string SimPlotSvg(const SimReport& report) {
  plot::Panel hit, ttft;
  plot::Series bounded{"replayed", {}, false}, unbounded{"never evicts", {}, true};
  plot::Series mean{"mean", {}, false}, p99{"p99", {}, false};
  for (const SimRow& r : report.rows) {
    const double capacity = static_cast<double>(r.capacity_blocks);
    bounded.points.emplace_back(capacity, 100.0 * r.token_hit_rate());
    unbounded.points.emplace_back(capacity, 100.0 * report.unbounded.token_hit_rate());
    mean.points.emplace_back(capacity, r.mean_ttft_s);
    p99.points.emplace_back(capacity, r.p99_ttft_s);
  }
  const std::string x_label = "KV cache capacity (blocks of " +
                              std::to_string(report.options.block_tokens) + " tokens)";
  hit.line = {"Prefix-cache hit rate", x_label, "token hit rate (%)", true, {bounded, unbounded}};
  ttft.line = {"Time to first token", x_label, "TTFT (s)", true, {mean, p99}};
  return plot::RenderSvg("kvserve sim: " + report.trace_name, {hit, ttft});
}

}  // namespace kvserve::sim

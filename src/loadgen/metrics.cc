#include "loadgen/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "base/percentile.h"
#include "base/str_format.h"
#include "base/check.h"

namespace kvserve::loadgen {
namespace {

using json = nlohmann::json;

// One table row: label padded to 40 columns, then the value.
std::string Row(const std::string& label, const std::string& value) {
  return StrFormat("%-40s %s\n", label.c_str(), value.c_str());
}

// "----Title----" centred in 50 columns.
std::string Section(const std::string& title, char fill) {
  const int width = 50;
  const int pad = std::max(0, width - static_cast<int>(title.size()));
  return std::string(static_cast<size_t>(pad / 2), fill) + title +
         std::string(static_cast<size_t>(pad - pad / 2), fill) + "\n";
}

std::string LatencyRows(const char* abbrev, const LatencyStats& s) {
  std::string out;
  out += Row(StrFormat("Mean %s (ms):", abbrev), StrFormat("%.2f", s.mean_ms));
  out += Row(StrFormat("Median %s (ms):", abbrev), StrFormat("%.2f", s.median_ms));
  out += Row(StrFormat("P90 %s (ms):", abbrev), StrFormat("%.2f", s.p90_ms));
  out += Row(StrFormat("P99 %s (ms):", abbrev), StrFormat("%.2f", s.p99_ms));
  return out;
}

json LatencyJson(const LatencyStats& s) {
  return json{{"count", s.count},         {"mean_ms", s.mean_ms}, {"std_ms", s.std_ms},
              {"median_ms", s.median_ms}, {"p90_ms", s.p90_ms},   {"p99_ms", s.p99_ms},
              {"min_ms", s.min_ms},       {"max_ms", s.max_ms}};
}

// Parses the value token of an exposition line (float, NaN, +Inf, -Inf).
std::optional<double> ParseValue(std::string_view token) {
  if (token.empty()) return std::nullopt;
  const std::string s(token);
  if (s == "+Inf" || s == "Inf") return HUGE_VAL;
  if (s == "-Inf") return -HUGE_VAL;
  if (s == "NaN") return std::nan("");
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0') return std::nullopt;
  return v;
}

}  // namespace

LatencyStats ComputeLatencyStats(const std::vector<double>& v) {
  LatencyStats s;
  s.count = static_cast<int64_t>(v.size());
  if (v.empty()) return s;
  double sum = 0.0;
  for (double x : v) sum += x;
  s.mean_ms = sum / static_cast<double>(v.size());
  double sq = 0.0;
  for (double x : v) sq += (x - s.mean_ms) * (x - s.mean_ms);
  s.std_ms = std::sqrt(sq / static_cast<double>(v.size()));
  std::vector<double> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  s.min_ms = sorted.front();
  s.max_ms = sorted.back();
  s.median_ms = PercentileOfSorted(sorted, 50.0);
  s.p90_ms = PercentileOfSorted(sorted, 90.0);
  s.p99_ms = PercentileOfSorted(sorted, 99.0);
  return s;
}

std::map<std::string, double> SumPrometheusSeries(std::string_view text) {
  std::map<std::string, double> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
      line.remove_suffix(1);
    }
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ' && line[i] != '\t') ++i;
    const std::string name(line.substr(0, i));
    if (name.empty()) continue;
    if (i < line.size() && line[i] == '{') {
      // Skip the label set; values are quoted and may hold escaped quotes or braces.
      bool in_quotes = false;
      ++i;
      for (; i < line.size(); ++i) {
        const char c = line[i];
        if (in_quotes) {
          if (c == '\\') ++i;
          else if (c == '"') in_quotes = false;
        } else if (c == '"') {
          in_quotes = true;
        } else if (c == '}') {
          break;
        }
      }
      if (i >= line.size()) continue;  // unterminated labels
      ++i;
    }
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    std::optional<double> v = ParseValue(line.substr(i, j - i));
    if (!v) continue;
    out[name] += *v;
  }
  return out;
}

std::optional<PrefixCacheCounters> ExtractPrefixCacheCounters(std::string_view metrics_text) {
  const std::map<std::string, double> series = SumPrometheusSeries(metrics_text);
  struct Candidate {
    const char* prefix;
    const char* queries;
    const char* hits;
  };
  static const Candidate kCandidates[] = {
      {"kvserve:", "kvserve:prefix_cache_queries_total", "kvserve:prefix_cache_hits_total"},
      {"vllm:", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"},
      {"vllm:", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits"},
      {"vllm:", "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total"},
      {"vllm:", "vllm:gpu_prefix_cache_queries", "vllm:gpu_prefix_cache_hits"},
  };
  for (const Candidate& c : kCandidates) {
    auto q = series.find(c.queries);
    auto h = series.find(c.hits);
    if (q != series.end() && h != series.end()) {
      return PrefixCacheCounters{c.prefix, q->second, h->second};
    }
  }
  return std::nullopt;
}

std::optional<double> PrefixCacheReport::server_hit_rate() const {
  if (!server_available || delta_queries_tokens <= 0.0) return std::nullopt;
  return delta_hits_tokens / delta_queries_tokens;
}

std::optional<double> PrefixCacheReport::usage_cached_fraction() const {
  if (num_requests_with_cached_tokens == 0 || usage_prompt_tokens <= 0) return std::nullopt;
  return static_cast<double>(usage_cached_tokens) / static_cast<double>(usage_prompt_tokens);
}

std::optional<double> RequestTpotMs(const RequestResult& r) {
  if (!r.success || r.output_tokens <= 1) return std::nullopt;
  return (r.e2e_ms - r.ttft_ms) / static_cast<double>(r.output_tokens - 1);
}

BenchmarkSummary Summarize(const BenchmarkResult& result) {
  BenchmarkSummary s;
  s.num_requests = static_cast<int64_t>(result.requests.size());
  s.duration_s = result.duration_s;
  std::vector<double> ttft, tpot, itl, e2e;
  std::map<std::string, std::vector<double>> tier_ttft;
  std::unordered_map<std::string, int64_t> errors;
  for (const RequestResult& r : result.requests) {
    if (!r.success) {
      ++s.num_failed;
      ++errors[r.error];
      continue;
    }
    ++s.num_successful;
    s.total_input_tokens += r.prompt_len();
    s.total_output_tokens += r.output_tokens;
    ttft.push_back(r.ttft_ms);
    e2e.push_back(r.e2e_ms);
    if (!r.cache_tier.empty()) {
      ++s.cache_tier_requests[r.cache_tier];
      tier_ttft[r.cache_tier].push_back(r.ttft_ms);
    }
    if (const std::optional<double> t = RequestTpotMs(r)) tpot.push_back(*t);
    itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
  }
  s.ttft = ComputeLatencyStats(ttft);
  s.tpot = ComputeLatencyStats(tpot);
  s.itl = ComputeLatencyStats(itl);
  s.e2e = ComputeLatencyStats(e2e);
  for (const auto& [tier, values] : tier_ttft) s.cache_tier_ttft[tier] = ComputeLatencyStats(values);
  if (s.duration_s > 0.0) {
    s.request_throughput_per_s = static_cast<double>(s.num_successful) / s.duration_s;
    s.output_throughput_tokens_per_s = static_cast<double>(s.total_output_tokens) / s.duration_s;
    s.total_throughput_tokens_per_s =
        static_cast<double>(s.total_input_tokens + s.total_output_tokens) / s.duration_s;
  }
  s.errors.assign(errors.begin(), errors.end());
  std::sort(s.errors.begin(), s.errors.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  return s;
}

std::string FormatSummaryTable(const BenchmarkResult& r, const BenchmarkSummary& s) {
  std::string out;
  out += Section(" Serving Benchmark Result ", '=');
  out += Row("Successful requests:", std::to_string(s.num_successful));
  out += Row("Failed requests:", std::to_string(s.num_failed));
  std::string rate = "inf";
  if (r.request_rate_per_s && std::isfinite(*r.request_rate_per_s)) {
    rate = StrFormat("%.2f", *r.request_rate_per_s);
  } else if (!r.request_rate_per_s && r.trace_timestamps) {
    rate = "trace timestamps";
  }
  out += Row("Request rate (req/s):", rate);
  out += Row("Maximum request concurrency:",
             r.max_concurrency > 0 ? std::to_string(r.max_concurrency) : "unbounded");
  out += Row("Peak concurrent requests:", std::to_string(r.peak_concurrent_requests));
  out += Row("Benchmark duration (s):", StrFormat("%.2f", s.duration_s));
  out += Row("Total input tokens:", std::to_string(s.total_input_tokens));
  out += Row("Total generated tokens:", std::to_string(s.total_output_tokens));
  out += Row("Request throughput (req/s):", StrFormat("%.2f", s.request_throughput_per_s));
  out += Row("Output token throughput (tok/s):", StrFormat("%.2f", s.output_throughput_tokens_per_s));
  out += Row("Total token throughput (tok/s):", StrFormat("%.2f", s.total_throughput_tokens_per_s));
  out += Section("Time to First Token", '-');
  out += LatencyRows("TTFT", s.ttft);
  out += Section("Time per Output Token (excl. 1st token)", '-');
  out += LatencyRows("TPOT", s.tpot);
  out += Section("Inter-token Latency", '-');
  out += LatencyRows("ITL", s.itl);
  out += Section("End-to-end Latency", '-');
  out += LatencyRows("E2EL", s.e2e);
  out += Section("Prefix Cache", '-');
  const PrefixCacheReport& p = r.prefix_cache;
  if (auto rate_hit = p.server_hit_rate()) {
    out += Row("Hit rate (server /metrics):",
               StrFormat("%.2f %% (%.0f of %.0f tokens, %s)", *rate_hit * 100.0, p.delta_hits_tokens,
                      p.delta_queries_tokens, p.server_metric_prefix.c_str()));
  } else if (p.server_available) {
    out += Row("Hit rate (server /metrics):", "n/a (no prefix-cache queries during the run)");
  } else {
    out += Row("Hit rate (server /metrics):", "unavailable (" + p.server_unavailable_reason + ")");
  }
  if (auto frac = p.usage_cached_fraction()) {
    out += Row("Cached prompt tokens (usage):",
               StrFormat("%.2f %% (%lld of %lld tokens)", *frac * 100.0,
                      static_cast<long long>(p.usage_cached_tokens),
                      static_cast<long long>(p.usage_prompt_tokens)));
  } else {
    out += Row("Cached prompt tokens (usage):", "not reported by the server");
  }
  if (!s.cache_tier_requests.empty()) {
    out += Section("Response Cache (x-kvserve-cache)", '-');
    int64_t hits = 0, total = 0;
    for (const auto& [tier, n] : s.cache_tier_requests) {
      total += n;
      if (tier != "miss") hits += n;
    }
    out += Row("Hit rate:", StrFormat("%.2f %% (%lld of %lld requests)",
                                      100.0 * static_cast<double>(hits) / static_cast<double>(total),
                                      static_cast<long long>(hits), static_cast<long long>(total)));
    for (const auto& [tier, stats] : s.cache_tier_ttft) {
      out += Row("TTFT " + tier + " median / P99 (ms):",
                 StrFormat("%.2f / %.2f (%lld requests)", stats.median_ms, stats.p99_ms,
                           static_cast<long long>(s.cache_tier_requests.at(tier))));
    }
  }
  out += std::string(50, '=') + "\n";
  return out;
}

json ResultToJson(const BenchmarkResult& r, const BenchmarkSummary& s) {
  json j;
  j["base_url"] = r.base_url;
  j["endpoint"] = r.endpoint;
  j["model"] = r.model;
  j["dataset_name"] = r.dataset_name;
  if (r.request_rate_per_s) {
    j["request_rate_per_s"] = std::isfinite(*r.request_rate_per_s) ? json(*r.request_rate_per_s) : json("inf");
  } else {
    j["request_rate_per_s"] = r.trace_timestamps ? json("trace") : json("inf");
  }
  j["max_concurrency"] = r.max_concurrency > 0 ? json(r.max_concurrency) : json(nullptr);
  j["peak_concurrent_requests"] = r.peak_concurrent_requests;
  j["duration_s"] = s.duration_s;
  j["num_requests"] = s.num_requests;
  j["completed"] = s.num_successful;
  j["failed"] = s.num_failed;
  j["total_input_tokens"] = s.total_input_tokens;
  j["total_output_tokens"] = s.total_output_tokens;
  j["request_throughput_per_s"] = s.request_throughput_per_s;
  j["output_throughput_tokens_per_s"] = s.output_throughput_tokens_per_s;
  j["total_throughput_tokens_per_s"] = s.total_throughput_tokens_per_s;
  j["ttft"] = LatencyJson(s.ttft);
  if (!s.cache_tier_requests.empty()) {
    json tiers = json::object();
    for (const auto& [tier, n] : s.cache_tier_requests) {
      tiers[tier] = {{"requests", n}, {"ttft", LatencyJson(s.cache_tier_ttft.at(tier))}};
    }
    j["response_cache"] = tiers;
  }
  j["tpot"] = LatencyJson(s.tpot);
  j["itl"] = LatencyJson(s.itl);
  j["e2el"] = LatencyJson(s.e2e);
  json errors = json::array();
  for (const auto& [msg, n] : s.errors) errors.push_back(json{{"error", msg}, {"count", n}});
  j["error_counts"] = errors;

  const PrefixCacheReport& p = r.prefix_cache;
  json pc;
  pc["server_metrics_available"] = p.server_available;
  if (p.server_available) {
    pc["server_metric_prefix"] = p.server_metric_prefix;
    pc["delta_queries_tokens"] = p.delta_queries_tokens;
    pc["delta_hits_tokens"] = p.delta_hits_tokens;
  } else {
    pc["server_unavailable_reason"] = p.server_unavailable_reason;
  }
  auto hr = p.server_hit_rate();
  pc["server_hit_rate"] = hr ? json(*hr) : json(nullptr);
  pc["usage_requests_with_cached_tokens"] = p.num_requests_with_cached_tokens;
  pc["usage_cached_tokens"] = p.usage_cached_tokens;
  pc["usage_prompt_tokens"] = p.usage_prompt_tokens;
  auto cf = p.usage_cached_fraction();
  pc["usage_cached_fraction"] = cf ? json(*cf) : json(nullptr);
  j["prefix_cache"] = pc;

  // Per-request arrays, in dataset order (failed requests included; see "successes").
  json success = json::array(), status = json::array(), errs = json::array(),
       input_lens = json::array(), output_lens = json::array(), cached = json::array(),
       scheduled = json::array(), sent = json::array(), ttfts = json::array(),
       e2els = json::array(), itls = json::array();
  for (const RequestResult& q : r.requests) {
    success.push_back(q.success);
    status.push_back(q.http_status);
    errs.push_back(q.error);
    input_lens.push_back(q.prompt_len());
    output_lens.push_back(q.output_tokens);
    cached.push_back(q.cached_tokens >= 0 ? json(q.cached_tokens) : json(nullptr));
    scheduled.push_back(q.scheduled_ms);
    sent.push_back(q.send_ms);
    ttfts.push_back(q.ttft_ms);
    e2els.push_back(q.e2e_ms);
    itls.push_back(q.itl_ms);
  }
  j["successes"] = success;
  j["http_statuses"] = status;
  j["errors"] = errs;
  j["input_lens"] = input_lens;
  j["output_lens"] = output_lens;
  j["cached_tokens"] = cached;
  j["scheduled_ms"] = scheduled;
  j["send_ms"] = sent;
  j["ttfts_ms"] = ttfts;
  j["e2els_ms"] = e2els;
  j["itls_ms"] = itls;
  return j;
}

}  // namespace kvserve::loadgen

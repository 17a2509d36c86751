// Prometheus text exposition (format 0.0.4) for `GET /metrics`: a writer for metric families
// and a thread-safe histogram, plus ServerMetrics, the counters the HTTP side owns (request
// outcomes, latency histograms, the recent prefix-cache hit rate). Engine-side numbers
// (queues, KV blocks, prefix cache counters) come from EngineStats at scrape time.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace kvserve {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// Builds one exposition document. Each family is written once (HELP, TYPE, then its samples);
// names get the writer's prefix. Label values are escaped. Not thread-safe (one per scrape).
class PrometheusWriter {
 public:
  explicit PrometheusWriter(std::string prefix) : prefix_(std::move(prefix)) {}

  // type: "counter", "gauge" or "histogram". Counter names should end in _total.
  void family(const std::string& name, const std::string& type, const std::string& help);
  // One sample of the family last declared (name may add a suffix: _bucket, _sum, _count).
  void sample(const std::string& name, double value, const MetricLabels& labels = {});
  // Shorthand: a family with one unlabelled sample.
  void single(const std::string& name, const std::string& type, const std::string& help,
              double value);

  const std::string& text() const { return out_; }

 private:
  std::string prefix_;
  std::string out_;
};

// Cumulative histogram with fixed upper bounds (seconds). Thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // Writes the family's _bucket (with le="+Inf"), _sum and _count samples, each with `labels`
  // (before le).
  void write(PrometheusWriter* w, const std::string& name, const MetricLabels& labels = {}) const;
  int64_t count() const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket (not cumulative); last = +Inf
  double sum_ = 0.0;
  int64_t count_ = 0;
};

// One histogram per value of a label, with at most `max_values` distinct values: observations
// with further values go to the value "other", so the series a scrape returns stay bounded
// whatever clients send. Thread-safe.
class LabeledHistogram {
 public:
  LabeledHistogram(std::string label_name, std::vector<double> upper_bounds, int64_t max_values);
  void observe(const std::string& label_value, double value);
  // Writes every value's _bucket, _sum and _count samples (values in sorted order).
  void write(PrometheusWriter* w, const std::string& name) const;
  // Observations per label value ("other" included once used).
  std::map<std::string, int64_t> counts() const;

  static constexpr const char* kOtherValue = "other";

 private:
  const std::string label_name_;
  const std::vector<double> bounds_;
  const int64_t max_values_;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Histogram>> by_value_;
};

// The `namespace` label of a request's prefix-cache namespace: "default" without a
// cache_salt, else "salt-" and 8 hex digits of a hash of the salt (the salt itself is a
// tenant's secret and never appears on /metrics).
std::string PromptNamespaceLabel(const std::string& cache_salt);

// Prefix-cache hit rate over the most recent `window_requests` requests (prompt tokens served
// from the cache over prompt tokens), so that the number stays meaningful when the server is
// idle (no requests: it keeps describing the last ones). Thread-safe.
class RecentHitRate {
 public:
  explicit RecentHitRate(int64_t window_requests) : window_(window_requests) {}
  void record(int64_t prompt_tokens, int64_t cached_tokens);
  // 0 before any request.
  double rate() const;
  int64_t window_requests() const { return window_; }

 private:
  mutable std::mutex mu_;
  int64_t window_;
  std::deque<std::pair<int64_t, int64_t>> recent_;  // (prompt tokens, cached tokens)
  int64_t sum_prompt_ = 0;
  int64_t sum_cached_ = 0;
};

// The HTTP side's own metrics. Thread-safe.
struct ServerMetrics {
  ServerMetrics();
  // finished_reason: "stop", "length", "abort", "error".
  void count_finished(const std::string& finished_reason);
  void count_http_error(int status);
  std::map<std::string, int64_t> finished() const;
  std::map<int, int64_t> http_errors() const;
  // A finished request with token eviction: `evicted` of its `total` computed tokens lost
  // their KV (observes kept / total in request_kv_kept_fraction).
  void record_kv_eviction(const std::string& method, int64_t evicted, int64_t total);
  // Evicted tokens per method (kv_tokens_evicted_total{method}).
  std::map<std::string, int64_t> kv_tokens_evicted() const;

  Histogram time_to_first_token_seconds;
  Histogram inter_token_latency_seconds;
  Histogram e2e_request_latency_seconds;
  Histogram request_queue_time_seconds;
  Histogram request_prompt_tokens;
  Histogram request_generation_tokens;
  Histogram request_kv_kept_fraction;  // per finished request with token eviction
  // Per engine request at its first admission, by namespace (PromptNamespaceLabel): the
  // prompt tokens its best cached match covered, i.e. where the prompt first diverges from
  // what the prefix cache holds (whole blocks; never the last prompt token).
  LabeledHistogram prompt_divergence_tokens;
  RecentHitRate recent_hit_rate{1000};

  // Response cache (tier 1). A lookup's result: "miss", "exact" or "semantic"; `vetoed`: a
  // candidate above the threshold was refused by a lexical rule; `similarity`: the semantic
  // lookup's best similarity (< 0: none, e.g. exact mode), observed in the hit or miss
  // histogram; `seconds_saved`: the stored response's generation time (hits).
  void record_cache_lookup(const std::string& result, bool vetoed, double similarity,
                           double seconds_saved);
  void count_cache_store();
  struct CacheCounters {
    std::map<std::string, int64_t> lookups;  // by result
    int64_t vetoes = 0;
    int64_t stores = 0;
    double seconds_saved = 0.0;
  };
  CacheCounters cache_counters() const;
  Histogram cache_hit_similarity;
  Histogram cache_miss_similarity;  // the closest candidate of semantic misses (near misses)

  // Embeddings: a /v1/embeddings request's inputs and tokens (`api`), or a response-cache key
  // embedded (`cache`), and the seconds the embedding model ran.
  void record_embedding(bool api, int64_t num_inputs, int64_t num_tokens, double seconds);
  struct EmbeddingCounters {
    int64_t requests = 0;  // /v1/embeddings requests answered
    int64_t inputs = 0;
    int64_t tokens = 0;
    double seconds = 0.0;
    int64_t cache_keys = 0;  // response-cache keys embedded
    int64_t cache_tokens = 0;
    double cache_seconds = 0.0;
  };
  EmbeddingCounters embedding_counters() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, int64_t> finished_;
  std::map<int, int64_t> http_errors_;
  std::map<std::string, int64_t> kv_tokens_evicted_;
  CacheCounters cache_;
  EmbeddingCounters embedding_;
};

}  // namespace kvserve

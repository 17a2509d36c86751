#include "server/metrics.h"

#include <cmath>
#include <cstdio>

#include "base/check.h"
#include "kv/radix_cache.h"

namespace kvserve {
namespace {

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

}  // namespace

void PrometheusWriter::family(const std::string& name, const std::string& type,
                              const std::string& help) {
  out_ += "# HELP " + prefix_ + name + " " + EscapeHelp(help) + "\n";
  out_ += "# TYPE " + prefix_ + name + " " + type + "\n";
}

void PrometheusWriter::sample(const std::string& name, double value, const MetricLabels& labels) {
  out_ += prefix_ + name;
  if (!labels.empty()) {
    out_ += "{";
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out_ += ",";
      out_ += labels[i].first + "=\"" + EscapeLabelValue(labels[i].second) + "\"";
    }
    out_ += "}";
  }
  out_ += " " + FormatValue(value) + "\n";
}

void PrometheusWriter::single(const std::string& name, const std::string& type,
                              const std::string& help, double value) {
  family(name, type, help);
  sample(name, value);
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  for (size_t i = 1; i < bounds_.size(); ++i) KV_CHECK(bounds_[i - 1] < bounds_[i]);
}

void Histogram::observe(double value) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

int64_t Histogram::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

void Histogram::write(PrometheusWriter* w, const std::string& name,
                      const MetricLabels& labels) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto with_le = [&](std::string le) {
    MetricLabels l = labels;
    l.emplace_back("le", std::move(le));
    return l;
  };
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    w->sample(name + "_bucket", static_cast<double>(cumulative), with_le(FormatValue(bounds_[i])));
  }
  cumulative += counts_.back();
  w->sample(name + "_bucket", static_cast<double>(cumulative), with_le("+Inf"));
  w->sample(name + "_sum", sum_, labels);
  w->sample(name + "_count", static_cast<double>(count_), labels);
}

LabeledHistogram::LabeledHistogram(std::string label_name, std::vector<double> upper_bounds,
                                   int64_t max_values)
    : label_name_(std::move(label_name)), bounds_(std::move(upper_bounds)), max_values_(max_values) {
  KV_CHECK(max_values_ >= 1);
}

void LabeledHistogram::observe(const std::string& label_value, double value) {
  Histogram* h = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_value_.find(label_value);
    if (it == by_value_.end()) {
      // Values beyond the bound (not counting "other" itself) fold into "other".
      const int64_t distinct = static_cast<int64_t>(by_value_.size()) -
                               (by_value_.count(kOtherValue) > 0 ? 1 : 0);
      const std::string& key = distinct < max_values_ ? label_value : std::string(kOtherValue);
      it = by_value_.find(key);
      if (it == by_value_.end()) {
        it = by_value_.emplace(key, std::make_unique<Histogram>(bounds_)).first;
      }
    }
    h = it->second.get();
  }
  h->observe(value);  // histograms are never removed
}

void LabeledHistogram::write(PrometheusWriter* w, const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [value, h] : by_value_) h->write(w, name, {{label_name_, value}});
}

std::map<std::string, int64_t> LabeledHistogram::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, int64_t> out;
  for (const auto& [value, h] : by_value_) out[value] = h->count();
  return out;
}

std::string PromptNamespaceLabel(const std::string& cache_salt) {
  if (cache_salt.empty()) return "default";
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08llx",
                static_cast<unsigned long long>(NamespaceKey(cache_salt) >> 32));
  return std::string("salt-") + buf;
}

void RecentHitRate::record(int64_t prompt_tokens, int64_t cached_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  recent_.emplace_back(prompt_tokens, cached_tokens);
  sum_prompt_ += prompt_tokens;
  sum_cached_ += cached_tokens;
  while (static_cast<int64_t>(recent_.size()) > window_) {
    sum_prompt_ -= recent_.front().first;
    sum_cached_ -= recent_.front().second;
    recent_.pop_front();
  }
}

double RecentHitRate::rate() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sum_prompt_ > 0 ? static_cast<double>(sum_cached_) / static_cast<double>(sum_prompt_)
                         : 0.0;
}

namespace {
// vLLM's buckets (seconds).
std::vector<double> TtftBuckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
          7.5,   10.0,  20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> ItlBuckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
          10.0, 20.0, 40.0, 80.0};
}
std::vector<double> RequestBuckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,  2.0,   2.5,   5.0,   10.0,  15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}
std::vector<double> TokenBuckets() {
  return {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};
}
// Divergence points: multiples of the usual block sizes; 0 is "nothing cached".
std::vector<double> DivergenceBuckets() {
  return {0, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072};
}
}  // namespace

ServerMetrics::ServerMetrics()
    : time_to_first_token_seconds(TtftBuckets()),
      inter_token_latency_seconds(ItlBuckets()),
      e2e_request_latency_seconds(RequestBuckets()),
      request_queue_time_seconds(RequestBuckets()),
      request_prompt_tokens(TokenBuckets()),
      request_generation_tokens(TokenBuckets()),
      request_kv_kept_fraction({0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9,
                                0.95, 1.0}),
      prompt_divergence_tokens("namespace", DivergenceBuckets(), /*max_values=*/64),
      cache_hit_similarity({0.5, 0.7, 0.8, 0.85, 0.9, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99, 1.0}),
      cache_miss_similarity({0.5, 0.7, 0.8, 0.85, 0.9, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99,
                             1.0}) {}

void ServerMetrics::record_cache_lookup(const std::string& result, bool vetoed, double similarity,
                                        double seconds_saved) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++cache_.lookups[result];
    cache_.vetoes += vetoed ? 1 : 0;
    cache_.seconds_saved += seconds_saved;
  }
  if (similarity >= 0.0 && result == "semantic") cache_hit_similarity.observe(similarity);
  if (similarity >= 0.0 && result == "miss") cache_miss_similarity.observe(similarity);
}

void ServerMetrics::count_cache_store() {
  std::lock_guard<std::mutex> lock(mu_);
  ++cache_.stores;
}

void ServerMetrics::record_embedding(bool api, int64_t num_inputs, int64_t num_tokens,
                                     double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  if (api) {
    ++embedding_.requests;
    embedding_.inputs += num_inputs;
    embedding_.tokens += num_tokens;
    embedding_.seconds += seconds;
  } else {
    embedding_.cache_keys += num_inputs;
    embedding_.cache_tokens += num_tokens;
    embedding_.cache_seconds += seconds;
  }
}

ServerMetrics::EmbeddingCounters ServerMetrics::embedding_counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return embedding_;
}

ServerMetrics::CacheCounters ServerMetrics::cache_counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_;
}

void ServerMetrics::record_kv_eviction(const std::string& method, int64_t evicted,
                                       int64_t total) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    kv_tokens_evicted_[method] += evicted;
  }
  if (total > 0) {
    request_kv_kept_fraction.observe(static_cast<double>(total - evicted) /
                                     static_cast<double>(total));
  }
}

std::map<std::string, int64_t> ServerMetrics::kv_tokens_evicted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kv_tokens_evicted_;
}

void ServerMetrics::count_finished(const std::string& finished_reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++finished_[finished_reason];
}

void ServerMetrics::count_http_error(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++http_errors_[status];
}

std::map<std::string, int64_t> ServerMetrics::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

std::map<int, int64_t> ServerMetrics::http_errors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return http_errors_;
}

}  // namespace kvserve

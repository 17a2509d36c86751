#include "loadgen/bench.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>

#include "base/check.h"

namespace kvserve::loadgen {
namespace {

double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Scrapes /metrics; the counters or the reason they are unavailable.
std::optional<PrefixCacheCounters> ScrapePrefixCounters(OpenAiClient& client, std::string* reason) {
  StatusOr<std::string> text = client.Get("/metrics");
  if (!text.ok()) {
    *reason = "GET /metrics failed: " + text.status().message();
    return std::nullopt;
  }
  std::optional<PrefixCacheCounters> c = ExtractPrefixCacheCounters(*text);
  if (!c) *reason = "the server's /metrics has no prefix-cache query/hit counters";
  return c;
}

}  // namespace

StatusOr<BenchmarkResult> RunBenchmark(const BenchmarkOptions& options,
                                       const std::vector<BenchRequest>& requests,
                                       const ProgressCallback& progress) {
  if (requests.empty()) return InvalidArgumentError("no requests to send");
  if (options.max_concurrency < 0) return InvalidArgumentError("--max-concurrency must be >= 0");
  if (options.arrivals.request_rate_per_s && !(*options.arrivals.request_rate_per_s > 0.0)) {
    return InvalidArgumentError("--request-rate must be > 0 (or inf)");
  }
  if (!(options.arrivals.trace_time_scale >= 0.0) || !std::isfinite(options.arrivals.trace_time_scale)) {
    return InvalidArgumentError("--trace-time-scale must be a finite number >= 0");
  }
  for (const BenchRequest& r : requests) {
    if (r.output_len < 1) return InvalidArgumentError("every request needs max_tokens >= 1");
  }

  KV_ASSIGN_OR_RETURN(std::unique_ptr<OpenAiClient> control, OpenAiClient::Create(options.client));
  RequestBodyOptions body = options.body;
  if (body.model.empty()) {
    StatusOr<std::string> model = control->FirstModelId();
    if (!model.ok()) {
      return model.status().WithContext("cannot ask " + options.client.base_url +
                                        " for its model (or pass --model)");
    }
    body.model = *model;
  }
  // Bodies are built up front: a bad --extra-body fails before anything is sent.
  std::vector<std::string> bodies;
  bodies.reserve(requests.size());
  for (const BenchRequest& r : requests) {
    KV_ASSIGN_OR_RETURN(std::string b, BuildRequestBody(r, body));
    bodies.push_back(std::move(b));
  }

  BenchmarkResult result;
  result.base_url = options.client.base_url;
  result.endpoint = body.endpoint;
  result.model = body.model;
  result.dataset_name = options.dataset_name;
  result.request_rate_per_s = options.arrivals.request_rate_per_s;
  result.trace_timestamps =
      !options.arrivals.request_rate_per_s &&
      std::all_of(requests.begin(), requests.end(), [](const BenchRequest& r) { return r.trace_arrival_ms >= 0; });
  result.max_concurrency = options.max_concurrency;
  result.requests.resize(requests.size());

  std::optional<PrefixCacheCounters> before;
  std::string reason = "not scraped (--no-metrics)";
  if (options.scrape_metrics) before = ScrapePrefixCounters(*control, &reason);

  const std::vector<double> arrival_s = ComputeArrivalTimes(requests, options.arrivals);
  const int64_t n = static_cast<int64_t>(requests.size());
  const int64_t bound = options.max_concurrency > 0 ? options.max_concurrency : kMaxClientThreads;
  const int64_t num_workers = std::min(n, bound);

  std::atomic<int64_t> next{0};
  std::atomic<int64_t> in_flight{0};
  std::atomic<int64_t> peak{0};
  std::mutex mu;
  std::condition_variable cv;
  int64_t num_done = 0;        // guarded by mu
  int64_t num_workers_up = 0;  // guarded by mu: workers whose client is ready
  Clock::time_point last_end;  // guarded by mu
  std::string setup_error;     // guarded by mu

  // Workers build their clients first; the clock starts when all are ready.
  Clock::time_point start;
  bool started = false;  // guarded by mu

  auto worker = [&]() {
    StatusOr<std::unique_ptr<OpenAiClient>> client = OpenAiClient::Create(options.client);
    {
      std::unique_lock<std::mutex> lock(mu);
      if (!client.ok() && setup_error.empty()) setup_error = client.status().message();
      ++num_workers_up;
      cv.notify_all();
      cv.wait(lock, [&] { return started; });
    }
    while (true) {
      const int64_t i = next.fetch_add(1);
      if (i >= n) break;
      const size_t idx = static_cast<size_t>(i);
      const Clock::time_point due =
          start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrival_s[idx]));
      std::this_thread::sleep_until(due);
      const Clock::time_point send = Clock::now();
      const int64_t now_in_flight = in_flight.fetch_add(1) + 1;
      int64_t p = peak.load();
      while (now_in_flight > p && !peak.compare_exchange_weak(p, now_in_flight)) {
      }
      RequestResult r;
      if (client.ok()) {
        r = (*client)->StreamRequest(body.endpoint, bodies[idx]);
      } else {
        r.error = "client setup failed: " + client.status().message();
      }
      in_flight.fetch_sub(1);
      r.expected_prompt_len = requests[idx].prompt_len;
      r.scheduled_ms = arrival_s[idx] * 1000.0;
      r.send_ms = SecondsBetween(start, send) * 1000.0;
      const Clock::time_point end = Clock::now();
      {
        std::lock_guard<std::mutex> lock(mu);
        result.requests[idx] = std::move(r);
        ++num_done;
        last_end = std::max(last_end, end);
      }
      cv.notify_all();
    }
  };

  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(num_workers));
  for (int64_t w = 0; w < num_workers; ++w) {
    try {
      threads.emplace_back(worker);
    } catch (const std::system_error&) {
      break;  // the system's thread limit: run with the workers we have
    }
  }
  KV_CHECK(!threads.empty()) << "cannot start any client thread";
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return num_workers_up == static_cast<int64_t>(threads.size()); });
    start = Clock::now();
    last_end = start;
    started = true;
  }
  cv.notify_all();
  {
    std::unique_lock<std::mutex> lock(mu);
    while (num_done < n) {
      if (progress) {
        const int64_t done = num_done;
        lock.unlock();
        progress(done, n, SecondsBetween(start, Clock::now()));
        lock.lock();
      }
      cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return num_done == n; });
    }
  }
  for (std::thread& t : threads) t.join();
  result.duration_s = SecondsBetween(start, last_end);
  if (progress) progress(n, n, result.duration_s);
  result.peak_concurrent_requests = peak.load();

  PrefixCacheReport& pc = result.prefix_cache;
  if (before) {
    std::optional<PrefixCacheCounters> after = ScrapePrefixCounters(*control, &reason);
    if (after && after->metric_prefix == before->metric_prefix) {
      pc.server_available = true;
      pc.server_metric_prefix = after->metric_prefix;
      pc.delta_queries_tokens = after->queries_tokens - before->queries_tokens;
      pc.delta_hits_tokens = after->hits_tokens - before->hits_tokens;
    } else if (after) {
      reason = "the prefix-cache counters changed names during the run";
    }
  }
  if (!pc.server_available) pc.server_unavailable_reason = reason;
  for (const RequestResult& r : result.requests) {
    if (r.success && r.cached_tokens >= 0) {
      ++pc.num_requests_with_cached_tokens;
      pc.usage_cached_tokens += r.cached_tokens;
      pc.usage_prompt_tokens += r.prompt_len();
    }
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// ProgressBar

ProgressBar::ProgressBar(std::FILE* out) : ProgressBar(out, isatty(fileno(out)) != 0) {}
ProgressBar::ProgressBar(std::FILE* out, bool is_tty) : out_(out), tty_(is_tty) {}

void ProgressBar::Update(int64_t done, int64_t total, double elapsed_s) {
  if (total <= 0) return;
  const double frac = std::clamp(static_cast<double>(done) / static_cast<double>(total), 0.0, 1.0);
  if (tty_) {
    if (done < total && last_draw_s_ >= 0.0 && elapsed_s - last_draw_s_ < 0.1) return;
    last_draw_s_ = elapsed_s;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(frac * kWidth);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    const double rate = elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0.0;
    std::fprintf(out_, "\r[%s] %lld/%lld requests  %3.0f%%  %.1fs  %.2f req/s\033[K", bar.c_str(),
                 static_cast<long long>(done), static_cast<long long>(total), frac * 100.0, elapsed_s, rate);
    std::fflush(out_);
    active_ = true;
    return;
  }
  const int decile = static_cast<int>(frac * 10.0);
  if (decile == last_decile_) return;
  last_decile_ = decile;
  std::fprintf(out_, "progress: %lld/%lld requests (%d%%), %.1fs\n", static_cast<long long>(done),
               static_cast<long long>(total), decile * 10, elapsed_s);
  std::fflush(out_);
}

void ProgressBar::Finish() {
  if (tty_ && active_) {
    std::fprintf(out_, "\n");
    std::fflush(out_);
  }
  active_ = false;
}

}  // namespace kvserve::loadgen

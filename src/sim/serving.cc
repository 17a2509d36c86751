// `kvserve sim` as a prediction of `kvserve bench serve` (see serving.h).
#include "sim/serving.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <fstream>
#include <memory>
#include <random>

#include "base/check.h"
#include "base/hash.h"
#include "base/str_format.h"
#include "loadgen/bench.h"
#include "plot/svg_chart.h"
#include "sim/replica.h"

namespace kvserve::sim {
namespace {

using nlohmann::json;

Status FieldError(const std::string& origin, const std::string& what) {
  return InvalidArgumentError(origin + ": " + what);
}

// Keeps at most `max_points` points: the largest value of each of `max_points` equal spans.
std::vector<std::pair<double, int64_t>> Downsample(
    const std::vector<std::pair<double, int64_t>>& points, int64_t max_points) {
  if (max_points <= 0 || static_cast<int64_t>(points.size()) <= max_points) return points;
  std::vector<std::pair<double, int64_t>> out;
  const size_t n = points.size();
  const size_t k = static_cast<size_t>(max_points);
  for (size_t b = 0; b < k; ++b) {
    const size_t begin = b * n / k, end = (b + 1) * n / k;
    if (begin == end) continue;
    auto best = points[begin];
    for (size_t i = begin; i < end; ++i) {
      if (points[i].second > best.second) best = points[i];
    }
    out.push_back(best);
  }
  return out;
}

}  // namespace

StatusOr<ServingWorkload> WorkloadFromBenchRequests(
    const std::string& dataset_name, const std::vector<loadgen::BenchRequest>& requests,
    const loadgen::ArrivalOptions& arrivals) {
  if (requests.empty()) return InvalidArgumentError("sim: the dataset has no requests");
  ServingWorkload w;
  w.dataset_name = dataset_name;
  for (const loadgen::BenchRequest& r : requests) {
    if (r.prompt_token_ids.empty()) {
      return InvalidArgumentError("sim: dataset '" + dataset_name +
                                  "' has text prompts; sim needs token ids (random, "
                                  "shared-prefix, mooncake, azure or a result file)");
    }
    w.prompts.emplace_back(r.prompt_token_ids.begin(), r.prompt_token_ids.end());
    w.output_tokens.push_back(std::max<int64_t>(1, r.output_len));
  }
  w.arrival_s = loadgen::ComputeArrivalTimes(requests, arrivals);
  return w;
}

StatusOr<ServingWorkload> WorkloadFromBenchResult(const json& j, uint64_t seed, double time_scale,
                                                  const std::string& origin) {
  if (!j.is_object()) return FieldError(origin, "a bench serve result file is a JSON object");
  for (const char* key : {"input_lens", "output_lens", "send_ms"}) {
    if (!j.contains(key) || !j[key].is_array()) {
      return FieldError(origin, StrFormat("\"%s\" is missing or not an array (is this a "
                                          "`kvserve bench serve --result-file`?)", key));
    }
  }
  const json& in = j["input_lens"];
  const json& out = j["output_lens"];
  const json& send = j["send_ms"];
  const json* ok = j.contains("successes") && j["successes"].is_array() ? &j["successes"] : nullptr;
  if (in.size() != out.size() || in.size() != send.size() || (ok && ok->size() != in.size())) {
    return FieldError(origin, "\"input_lens\", \"output_lens\" and \"send_ms\" differ in length");
  }
  if (!(time_scale > 0) || !std::isfinite(time_scale)) {
    return InvalidArgumentError("--trace-time-scale must be a positive number");
  }
  struct Row {
    double send_ms;
    int64_t input, output;
  };
  std::vector<Row> rows;
  for (size_t i = 0; i < in.size(); ++i) {
    if (ok && !((*ok)[i].is_boolean() && (*ok)[i].get<bool>())) continue;
    if (!in[i].is_number_integer() || !out[i].is_number_integer() || !send[i].is_number()) {
      return FieldError(origin, StrFormat("request %zu: lengths must be integers and send_ms a "
                                          "number", i));
    }
    const int64_t input = in[i].get<int64_t>(), output = out[i].get<int64_t>();
    const double t = send[i].get<double>();
    if (input < 1 || input > (int64_t{1} << 24) || output < 0 || output > (int64_t{1} << 24) ||
        !(t >= 0) || !std::isfinite(t)) {
      return FieldError(origin, StrFormat("request %zu: a length or send time is out of range", i));
    }
    rows.push_back({t, input, output});
  }
  if (rows.empty()) return FieldError(origin, "no successful request to replay");
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.send_ms < b.send_ms; });
  ServingWorkload w;
  w.dataset_name = "result-file";
  std::mt19937_64 rng(HashCombine(seed, 0x7265706c));
  std::uniform_int_distribution<TokenId> token(100, 9999);  // bench serve's default range
  const double first_ms = rows.front().send_ms;
  for (const Row& r : rows) {
    std::vector<TokenId> prompt(static_cast<size_t>(r.input));
    for (TokenId& t : prompt) t = token(rng);
    w.prompts.push_back(std::move(prompt));
    w.output_tokens.push_back(std::max<int64_t>(1, r.output));
    w.arrival_s.push_back((r.send_ms - first_ms) / 1000.0 * time_scale);
  }
  return w;
}

StatusOr<ServingWorkload> BuildServingWorkload(loadgen::BenchSettings settings,
                                               std::string name, const std::string& trace_path,
                                               loadgen::ResolvedBench* resolved) {
  if (!trace_path.empty() && name.empty()) {
    KV_ASSIGN_OR_RETURN(name, DetectTraceFormat(trace_path));
  }
  if (name.empty()) name = "random";
  if (name == "result-file") {
    if (trace_path.empty()) return InvalidArgumentError("--dataset-name result-file needs --trace FILE");
    std::ifstream in(trace_path, std::ios::binary);
    if (!in) return NotFoundError("--trace: cannot open '" + trace_path + "'");
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return InvalidArgumentError("--trace '" + trace_path + "' is not valid JSON");
    settings.dataset.name = name;
    settings.dataset.dataset_path = trace_path;
    KV_ASSIGN_OR_RETURN(*resolved, loadgen::ResolveBenchSettings(settings));
    return WorkloadFromBenchResult(j, static_cast<uint64_t>(settings.seed),
                                   settings.trace_time_scale, "--trace '" + trace_path + "'");
  }
  if ((name == "mooncake" || name == "azure") && trace_path.empty()) {
    return InvalidArgumentError("--dataset-name " + name + " needs --trace FILE");
  }
  settings.dataset.name = name;
  settings.dataset.dataset_path = trace_path;
  KV_ASSIGN_OR_RETURN(*resolved, loadgen::ResolveBenchSettings(settings));
  KV_ASSIGN_OR_RETURN(const std::vector<loadgen::BenchRequest> requests,
                      loadgen::BuildDataset(resolved->dataset));
  return WorkloadFromBenchRequests(name, requests, resolved->options.arrivals);
}

StatusOr<std::string> DetectTraceFormat(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("--trace: cannot open '" + path + "'");
  std::string head(4096, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  const size_t first = head.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return InvalidArgumentError("--trace '" + path + "' is empty");
  if (head[first] == '{') {
    // One object per line (Mooncake) or one document (a result file, usually indented).
    const size_t line_end = head.find('\n', first);
    const std::string line = head.substr(first, line_end == std::string::npos ? std::string::npos
                                                                              : line_end - first);
    if (line.find("\"hash_ids\"") != std::string::npos ||
        line.find("\"input_length\"") != std::string::npos) {
      return std::string("mooncake");
    }
    return std::string("result-file");
  }
  if (head.compare(first, 9, "TIMESTAMP") == 0) return std::string("azure");
  return InvalidArgumentError("--trace '" + path +
                              "': not a Mooncake JSONL trace, an Azure CSV trace or a bench "
                              "serve result file (name the format with --dataset-name)");
}

StatusOr<ServingResult> SimulateServing(const ServingWorkload& w, const SimOptions& o,
                                        const ServingOptions& serving) {
  KV_RETURN_IF_ERROR(ValidateSimOptions(o));
  const size_t n = w.prompts.size();
  if (n == 0 || w.output_tokens.size() != n || w.arrival_s.size() != n) {
    return InvalidArgumentError("sim: an empty or inconsistent workload");
  }
  if (serving.capacity_blocks < 1) return InvalidArgumentError("sim: no KV cache blocks");
  if (serving.max_concurrency < 0) return InvalidArgumentError("--max-concurrency must be >= 0");
  const auto start = std::chrono::steady_clock::now();
  // The replica reads lengths and arrivals from TraceRequests; a request's "arrival" is its
  // send time, filled in when the client sends it.
  std::vector<TraceRequest> trace(n);
  for (size_t i = 0; i < n; ++i) {
    trace[i].input_tokens = static_cast<int64_t>(w.prompts[i].size());
    trace[i].output_tokens = w.output_tokens[i];
  }
  StatusOr<std::unique_ptr<ReplicaSim>> created =
      ReplicaSim::Create(trace, o, serving.capacity_blocks);
  if (!created.ok()) return created.status();
  ReplicaSim& replica = **created;
  replica.set_prompts(&w.prompts);
  replica.RecordTimeline();

  ServingResult result;
  result.capacity_blocks = serving.capacity_blocks;
  loadgen::BenchmarkResult& bench = result.bench;
  bench.dataset_name = w.dataset_name;
  bench.max_concurrency = serving.max_concurrency;
  bench.requests.resize(n);
  const int64_t bound =
      serving.max_concurrency > 0 ? serving.max_concurrency : loadgen::kMaxClientThreads;
  std::vector<double> send_s(n, -1.0);
  std::vector<uint8_t> rejected(n, 0);
  int64_t in_flight = 0;      // sent and not finished (client side)
  double slot_free_s = 0.0;   // when the last full client got a free slot
  // Sent, not yet at the engine: (arrival at the engine, request), in send order.
  std::deque<std::pair<double, size_t>> intake;
  double intake_free_s = 0.0;  // when the intake can take the next request
  const auto release_slot = [&] {
    if (in_flight-- == bound) slot_free_s = replica.now_s();
  };
  size_t next = 0;
  while (next < n || replica.busy() || !intake.empty()) {
    if (!replica.busy()) {  // idle: on to the next send or arrival at the engine
      double t = std::numeric_limits<double>::infinity();
      if (next < n && in_flight < bound) t = std::max(w.arrival_s[next], slot_free_s);
      if (!intake.empty()) t = std::min(t, intake.front().first);
      if (!std::isfinite(t)) break;  // cannot happen: a full client has requests in flight
      replica.AdvanceTo(t);
    }
    // Send what is due, in dataset order, while a slot is free.
    for (; next < n && w.arrival_s[next] <= replica.now_s() && in_flight < bound; ++next) {
      const size_t i = next;
      send_s[i] = std::max(w.arrival_s[i], slot_free_s);
      trace[i].timestamp_ms = send_s[i] * 1000.0;
      intake_free_s = std::max(intake_free_s, send_s[i]) + serving.request_intake_s;
      intake.emplace_back(intake_free_s, i);
      bench.peak_concurrent_requests = std::max(bench.peak_concurrent_requests, ++in_flight);
    }
    // Hand the engine what has reached it.
    while (!intake.empty() && intake.front().first <= replica.now_s()) {
      const size_t i = intake.front().second;
      intake.pop_front();
      if (!replica.Add(i)) {
        rejected[i] = 1;
        release_slot();
      }
    }
    if (!replica.busy()) continue;
    KV_RETURN_IF_ERROR(replica.Step());
    for (size_t k = 0; k < replica.finished_in_last_step().size(); ++k) release_slot();
  }
  result.row = replica.Finish();
  result.row.elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Per request, as bench serve's client records it (times in ms from the start).
  for (size_t i = 0; i < n; ++i) {
    loadgen::RequestResult& r = bench.requests[i];
    r.scheduled_ms = w.arrival_s[i] * 1000.0;
    r.send_ms = send_s[i] * 1000.0;
    r.expected_prompt_len = static_cast<int64_t>(w.prompts[i].size());
    if (rejected[i]) {
      r.http_status = 400;
      r.error = "prompt does not fit --max-model-len";
      continue;
    }
    const std::vector<double>& tokens = replica.token_times_s()[i];
    KV_CHECK(!tokens.empty()) << "request " << i;
    r.success = true;
    r.http_status = 200;
    r.prompt_tokens = r.expected_prompt_len;
    r.output_tokens = static_cast<int64_t>(tokens.size());
    r.num_content_chunks = r.output_tokens;
    r.cached_tokens = replica.first_cached_tokens()[i];
    r.usage_reported = r.done_received = true;
    r.ttft_ms = (tokens.front() - send_s[i]) * 1000.0;
    for (size_t k = 1; k < tokens.size(); ++k) r.itl_ms.push_back((tokens[k] - tokens[k - 1]) * 1000.0);
    r.e2e_ms = (replica.finish_s()[i] - send_s[i]) * 1000.0;
    bench.duration_s = std::max(bench.duration_s, replica.finish_s()[i]);
    bench.prefix_cache.num_requests_with_cached_tokens += 1;
    bench.prefix_cache.usage_cached_tokens += r.cached_tokens;
    bench.prefix_cache.usage_prompt_tokens += r.prompt_tokens;
  }
  // The server's counters count every lookup, re-admissions after preemption included.
  const SimRow& row = result.row;
  bench.prefix_cache.server_available = true;
  bench.prefix_cache.server_metric_prefix = "kvserve:";
  bench.prefix_cache.delta_queries_tokens =
      static_cast<double>(row.stats.prefix_queries_tokens + row.readmit_queries_tokens);
  bench.prefix_cache.delta_hits_tokens =
      static_cast<double>(row.stats.prefix_hits_tokens + row.readmit_hits_tokens);
  result.blocks_in_use = Downsample(replica.blocks_in_use(), serving.max_timeline_points);
  return result;
}

json ServingExtrasJson(const ServingResult& r, const SimOptions& o) {
  json j;
  json points = json::array();
  for (const auto& [t, blocks] : r.blocks_in_use) points.push_back({t, blocks});
  j["kv_blocks_in_use"] = points;
  j["capacity_blocks"] = r.capacity_blocks;
  j["block_size"] = o.block_tokens;
  j["num_preemptions"] = r.row.num_preemptions;
  j["num_steps"] = r.row.num_steps;
  j["sim_elapsed_s"] = r.row.elapsed_s;
  if (!o.deployment) {
    j["step_clock"] = {{"decode_tokens_per_s", o.decode_tokens_per_s},
                       {"prefill_tokens_per_s", o.prefill_tokens_per_s}};
    return j;
  }
  const cost::Deployment& d = *o.deployment;
  const cost::StepCost& t = r.row.step_time_total;
  j["step_time_breakdown_s"] = {{"matmul", t.matmul.seconds},   {"output", t.output.seconds},
                                {"attention", t.attention.seconds}, {"comm", t.comm_s},
                                {"overhead", t.overhead_s},      {"total", t.seconds}};
  j["hardware"] = {{"name", d.hardware.name},
                   {"tensor_parallel", d.tensor_parallel},
                   {"price_per_hour", d.hardware.price_per_hour}};
  j["kv_cache_dtype"] = DTypeName(d.kv.dtype);
  // The run's device-hours priced, over its tokens (all of it charged to each kind).
  const double dollars = d.hardware.price_per_hour * d.tensor_parallel * r.bench.duration_s / 3600.0;
  int64_t input = 0, output = 0;
  for (const loadgen::RequestResult& q : r.bench.requests) {
    if (!q.success) continue;
    input += q.prompt_len();
    output += q.output_tokens;
  }
  j["cost_usd"] = dollars;
  j["cost_per_million_input_tokens"] = input > 0 ? dollars / (static_cast<double>(input) / 1e6) : 0.0;
  j["cost_per_million_output_tokens"] =
      output > 0 ? dollars / (static_cast<double>(output) / 1e6) : 0.0;
  return j;
}

std::string FormatServingText(const ServingResult& r, const SimOptions& o) {
  const loadgen::BenchmarkSummary summary = loadgen::Summarize(r.bench);
  std::string out = loadgen::FormatSummaryTable(r.bench, summary);
  int64_t peak = 0;
  for (const auto& [t, blocks] : r.blocks_in_use) peak = std::max(peak, blocks);
  out += StrFormat("sim: %lld steps, %lld preemptions, peak %lld of %lld KV blocks in use "
                   "(%lld-token blocks), replayed in %.2f s\n",
                   static_cast<long long>(r.row.num_steps),
                   static_cast<long long>(r.row.num_preemptions), static_cast<long long>(peak),
                   static_cast<long long>(r.capacity_blocks),
                   static_cast<long long>(o.block_tokens), r.row.elapsed_s);
  if (!o.deployment) {
    out += StrFormat("sim: step clock %.1f ms + prefill tokens / %.0f tok/s\n",
                     1000.0 / o.decode_tokens_per_s, o.prefill_tokens_per_s);
    return out;
  }
  const cost::StepCost& t = r.row.step_time_total;
  auto share = [&](double s) { return t.seconds > 0 ? 100.0 * s / t.seconds : 0.0; };
  out += StrFormat("sim: step time %.3f s: matmul %.1f%%, output %.1f%%, attention %.1f%%, "
                   "all-reduce %.1f%%, overhead %.1f%%\n",
                   t.seconds, share(t.matmul.seconds), share(t.output.seconds),
                   share(t.attention.seconds), share(t.comm_s), share(t.overhead_s));
  const json extras = ServingExtrasJson(r, o);
  out += StrFormat("sim: cost $%.4f (%s x%d at $%.2f/h): $%.4f per million output tokens, "
                   "$%.4f per million input tokens\n",
                   extras["cost_usd"].get<double>(), o.deployment->hardware.name.c_str(),
                   o.deployment->tensor_parallel, o.deployment->hardware.price_per_hour,
                   extras["cost_per_million_output_tokens"].get<double>(),
                   extras["cost_per_million_input_tokens"].get<double>());
  return out;
}

std::string ServingPlotSvg(const ServingResult& result, const SimOptions& options) {
  std::vector<double> ttft, tpot;
  for (const loadgen::RequestResult& r : result.bench.requests) {
    if (!r.success) continue;
    ttft.push_back(r.ttft_ms);
    if (const std::optional<double> t = loadgen::RequestTpotMs(r)) tpot.push_back(*t);
  }
  plot::Panel ttft_panel, tpot_panel, blocks;
  ttft_panel.line = {"TTFT distribution", "TTFT (ms)", "fraction of requests", false,
                     {{"predicted", plot::CdfPoints(ttft), false}}};
  tpot_panel.line = {"TPOT distribution", "TPOT (ms)", "fraction of requests", false,
                     {{"predicted", plot::CdfPoints(tpot), false}}};
  plot::Series in_use{"blocks in use", {}, false};
  for (const auto& [t, b] : result.blocks_in_use) in_use.points.emplace_back(t, static_cast<double>(b));
  plot::Series capacity{"capacity", {}, true};
  if (!result.blocks_in_use.empty()) {
    capacity.points = {{result.blocks_in_use.front().first, static_cast<double>(result.capacity_blocks)},
                       {result.blocks_in_use.back().first, static_cast<double>(result.capacity_blocks)}};
  }
  blocks.line = {"KV blocks in use", "time (s)", "blocks", false, {in_use, capacity}};
  const std::string model = options.deployment ? options.deployment->model.name + " on " +
                                                     options.deployment->hardware.name
                                               : std::string("the two rates");
  return plot::RenderSvg("kvserve sim: " + result.bench.dataset_name + ", " + model,
                         {ttft_panel, tpot_panel, blocks});
}

}  // namespace kvserve::sim

// The prediction of bench serve: timings by hand with the two rates, the cost model agreeing
// with the rates where they are what it gives, the client's concurrency gate, the workloads
// (datasets, result files, format detection) and the report's fields.
#include "sim/serving.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "loadgen/metrics.h"
#include "plot/testing/svg_testing.h"

namespace kvserve::sim {
namespace {

using plot::testing::CountSvgElements;

using nlohmann::json;

ServingWorkload Workload(std::vector<int64_t> inputs, std::vector<int64_t> outputs,
                         std::vector<double> arrivals) {
  ServingWorkload w;
  w.dataset_name = "test";
  TokenId next = 1;
  for (int64_t len : inputs) {
    std::vector<TokenId> p(static_cast<size_t>(len));
    for (TokenId& t : p) t = next++;  // no sharing
    w.prompts.push_back(std::move(p));
  }
  w.output_tokens = std::move(outputs);
  w.arrival_s = std::move(arrivals);
  return w;
}

SimOptions Rates(double decode, double prefill) {
  SimOptions o;
  o.block_tokens = 16;
  o.decode_tokens_per_s = decode;
  o.prefill_tokens_per_s = prefill;
  o.scheduler.max_num_batched_tokens = 0;
  return o;
}

TEST(Serving, OneRequestTimedByHand) {
  // 100-token prompt, 5 tokens: a 0.1 + 100 / 1000 = 0.2 s prefill that samples the first,
  // then four 0.1 s decodes.
  const ServingWorkload w = Workload({100}, {5}, {0.5});
  StatusOr<ServingResult> r =
      SimulateServing(w, Rates(10, 1000), {.capacity_blocks = 100, .request_intake_s = 0.0});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const loadgen::RequestResult& q = r->bench.requests[0];
  EXPECT_TRUE(q.success);
  EXPECT_DOUBLE_EQ(q.scheduled_ms, 500.0);
  EXPECT_DOUBLE_EQ(q.send_ms, 500.0);
  EXPECT_NEAR(q.ttft_ms, 200.0, 1e-9);
  ASSERT_EQ(q.itl_ms.size(), 4u);
  for (double gap : q.itl_ms) EXPECT_NEAR(gap, 100.0, 1e-9);
  EXPECT_NEAR(q.e2e_ms, 600.0, 1e-9);
  EXPECT_EQ(q.output_tokens, 5);
  EXPECT_EQ(q.prompt_tokens, 100);
  EXPECT_EQ(q.cached_tokens, 0);
  EXPECT_NEAR(r->bench.duration_s, 1.1, 1e-12);
  const loadgen::BenchmarkSummary s = loadgen::Summarize(r->bench);
  EXPECT_NEAR(s.tpot.median_ms, 100.0, 1e-9);
  EXPECT_EQ(s.total_output_tokens, 5);
}

TEST(Serving, TokenEvictionCompactsAndHoldsFewerBlocks) {
  // Four 400-token prompts with 200 outputs each, all at once: without eviction each ends
  // holding 600 tokens (38 blocks); StreamingLLM at a 128-token budget compacts each
  // whenever it reaches 128 + 16 slots, so none ever holds more than 9 blocks.
  const ServingWorkload w = Workload({400, 400, 400, 400}, {200, 200, 200, 200}, {0, 0, 0, 0});
  SimOptions o = Rates(100, 10000);
  StatusOr<ServingResult> full = SimulateServing(w, o, {.capacity_blocks = 1000});
  ASSERT_TRUE(full.ok()) << full.status().message();
  o.kv_policy.method = KvEvictionMethod::kStreaming;
  o.kv_policy.budget_tokens = 128;
  StatusOr<ServingResult> evicted = SimulateServing(w, o, {.capacity_blocks = 1000});
  ASSERT_TRUE(evicted.ok()) << evicted.status().message();
  EXPECT_EQ(full->row.num_compactions, 0);
  EXPECT_GT(evicted->row.num_compactions, 4 * 200 / 16);  // in prefill and every 16 decodes
  EXPECT_EQ(full->row.peak_blocks_in_use, 4 * 38);
  EXPECT_LE(evicted->row.peak_blocks_in_use, 4 * 9);
  // The same tokens come out (compaction changes memory, not the work scheduled).
  EXPECT_EQ(loadgen::Summarize(evicted->bench).total_output_tokens, 800);
  // --plot: the TTFT and TPOT CDFs, blocks in use and the capacity line.
  EXPECT_EQ(CountSvgElements(ServingPlotSvg(*evicted, o), "polyline"), 4);
  o.kv_policy.method = KvEvictionMethod::kPyramidKv;
  EXPECT_FALSE(SimulateServing(w, o, {.capacity_blocks = 1000}).ok());
}

TEST(Serving, ConcurrencyGateSendsWhenARequestFinishes) {
  const ServingWorkload w = Workload({10, 10, 10}, {2, 2, 2}, {0, 0, 0});
  StatusOr<ServingResult> r = SimulateServing(
      w, Rates(10, 1e9), {.capacity_blocks = 100, .max_concurrency = 1, .request_intake_s = 0.0});
  ASSERT_TRUE(r.ok()) << r.status().message();
  // Each request: two 0.1 s steps; the next is sent when it ends.
  EXPECT_NEAR(r->bench.requests[1].send_ms, 200.0, 1e-3);
  EXPECT_NEAR(r->bench.requests[2].send_ms, 400.0, 1e-3);
  EXPECT_DOUBLE_EQ(r->bench.requests[2].scheduled_ms, 0.0);
  EXPECT_NEAR(r->bench.requests[2].ttft_ms, 100.0, 1e-3);  // latency starts at the send
  EXPECT_EQ(r->bench.peak_concurrent_requests, 1);
  // Unbounded: all three in the first step.
  r = SimulateServing(w, Rates(10, 1e9), {.capacity_blocks = 100, .request_intake_s = 0.0});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->bench.peak_concurrent_requests, 3);
  EXPECT_NEAR(r->bench.requests[2].e2e_ms, 200.0, 1e-3);
}

TEST(Serving, SimultaneousSendsReachTheEngineOneAfterAnother) {
  // Three requests sent at once, 1 ms intake each: the idle engine starts a 0.1 s step on the
  // first (at 1 ms); the other two arrive during it and start together in the next (they do
  // not add to the first step: its batch was fixed when it began).
  const ServingWorkload w = Workload({10, 10, 10}, {2, 2, 2}, {0, 0, 0});
  StatusOr<ServingResult> r =
      SimulateServing(w, Rates(10, 1e9), {.capacity_blocks = 100, .request_intake_s = 0.001});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_NEAR(r->bench.requests[0].ttft_ms, 101.0, 1e-3);
  EXPECT_NEAR(r->bench.requests[1].ttft_ms, 201.0, 1e-3);  // waits for the first step
  EXPECT_NEAR(r->bench.requests[2].ttft_ms, 201.0, 1e-3);
  EXPECT_NEAR(r->bench.requests[0].e2e_ms, 201.0, 1e-3);
  EXPECT_NEAR(r->bench.requests[2].e2e_ms, 301.0, 1e-3);
  for (const loadgen::RequestResult& q : r->bench.requests) EXPECT_DOUBLE_EQ(q.send_ms, 0.0);
  EXPECT_EQ(r->bench.peak_concurrent_requests, 3);
  // Sends spread wider than the intake arrive as they were sent.
  const ServingWorkload spread = Workload({10, 10}, {1, 1}, {0, 0.5});
  r = SimulateServing(spread, Rates(10, 1e9), {.capacity_blocks = 100, .request_intake_s = 0.001});
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->bench.requests[1].ttft_ms, 101.0, 1e-3);
}

// A deployment whose every step is bound by the same 1 GB weight read (1 TB/s): 1 ms a step
// whatever the step holds, as far as the KV traffic (4 bytes a token) does not show.
cost::Deployment ConstantStepDeployment() {
  cost::Deployment d;
  d.model.name = "flat";
  d.model.num_layers = 1;
  d.model.hidden_dim = 8;
  d.model.num_heads = 1;
  d.model.attention_qk_dim = d.model.attention_v_dim = 1;
  d.model.layer_parameters = 500'000'000;
  d.weight_bytes_per_parameter = 2.0;
  d.kv.num_layers = 1;
  d.kv.num_kv_heads = 1;
  d.kv.head_dim = 1;
  d.kv.dtype = DType::kBF16;
  d.kv.block_size = 16;
  d.hardware.name = "flat";
  d.hardware.memory_bytes = 1 << 30;
  d.hardware.memory_bandwidth_bytes_per_s = 1e12;
  d.hardware.peak_flops_bf16 = 1e18;
  d.hardware.efficiency.matmul = cost::EfficiencyCurve::Constant(1.0);
  d.hardware.efficiency.attention_default = cost::EfficiencyCurve::Constant(1.0);
  return d;
}

TEST(Serving, CostModelEqualsTheRatesItImplies) {
  const ServingWorkload w =
      Workload({300, 40, 700, 90}, {20, 7, 3, 12}, {0.0, 0.001, 0.0025, 0.02});
  SimOptions model = Rates(1, 1);
  model.deployment = ConstantStepDeployment();
  // The rates that model gives: 1000 steps a second, prefill free.
  const SimOptions rates = Rates(1000, 1e30);
  StatusOr<ServingResult> a = SimulateServing(w, model, {.capacity_blocks = 200});
  StatusOr<ServingResult> b = SimulateServing(w, rates, {.capacity_blocks = 200});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->row.num_steps, b->row.num_steps);
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    const loadgen::RequestResult& x = a->bench.requests[i];
    const loadgen::RequestResult& y = b->bench.requests[i];
    EXPECT_NEAR(x.ttft_ms, y.ttft_ms, 1e-3 * y.ttft_ms) << i;
    EXPECT_NEAR(x.e2e_ms, y.e2e_ms, 1e-3 * y.e2e_ms) << i;
    EXPECT_EQ(x.itl_ms.size(), y.itl_ms.size());
  }
  EXPECT_NEAR(a->row.step_time_total.matmul.seconds, 1e-3 * static_cast<double>(a->row.num_steps),
              1e-9);
}

TEST(Serving, SharedPrefixHitsAndTheReport) {
  loadgen::DatasetOptions d;
  d.name = "shared-prefix";
  d.sp_num_groups = 2;
  d.sp_prompts_per_group = 4;
  d.sp_system_prompt_len = 256;
  d.sp_question_len = 32;
  d.sp_output_len = 8;
  StatusOr<std::vector<loadgen::BenchRequest>> requests = loadgen::BuildDataset(d);
  ASSERT_TRUE(requests.ok());
  loadgen::ArrivalOptions arrivals;
  arrivals.request_rate_per_s = 20.0;
  StatusOr<ServingWorkload> w = WorkloadFromBenchRequests("shared-prefix", *requests, arrivals);
  ASSERT_TRUE(w.ok());
  SimOptions o = Rates(100, 10000);
  o.deployment = ConstantStepDeployment();
  o.deployment->hardware.price_per_hour = 3.6;
  StatusOr<ServingResult> r = SimulateServing(*w, o, {.capacity_blocks = 1000});
  ASSERT_TRUE(r.ok()) << r.status().message();
  int64_t cached = 0;
  for (const auto& q : r->bench.requests) cached += q.cached_tokens;
  EXPECT_GE(cached, 6 * 256);  // all but each group's first request hit the system prompt
  EXPECT_EQ(r->bench.prefix_cache.delta_hits_tokens, static_cast<double>(cached));
  const json doc = loadgen::ResultToJson(r->bench, loadgen::Summarize(r->bench));
  for (const char* key : {"output_throughput_tokens_per_s", "ttft", "tpot", "itl", "e2el",
                          "prefix_cache", "send_ms", "cached_tokens"}) {
    EXPECT_TRUE(doc.contains(key)) << key;
  }
  EXPECT_GT(doc["ttft"]["median_ms"].get<double>(), 0.0);
  const json extras = ServingExtrasJson(*r, o);
  // $3.6 an hour is $0.001 a second.
  EXPECT_NEAR(extras["cost_usd"].get<double>(), r->bench.duration_s * 0.001, 1e-12);
  EXPECT_NEAR(extras["cost_per_million_output_tokens"].get<double>(),
              r->bench.duration_s * 0.001 / (8 * 8 / 1e6), 1e-9);
  EXPECT_FALSE(extras["kv_blocks_in_use"].empty());
  EXPECT_NE(FormatServingText(*r, o).find("Time to First Token"), std::string::npos);
}

TEST(Serving, TimelineIsDownsampledKeepingPeaks) {
  const ServingWorkload w = Workload({64}, {200}, {0});
  StatusOr<ServingResult> r = SimulateServing(
      w, Rates(100, 1000), {.capacity_blocks = 100, .max_timeline_points = 10});
  ASSERT_TRUE(r.ok());
  ASSERT_LE(r->blocks_in_use.size(), 10u);
  // The largest of the last span: the blocks the sequence held as it finished (264 tokens).
  EXPECT_EQ(r->blocks_in_use.back().second, (64 + 200 + 15) / 16);
}

TEST(Serving, ResultFileWorkload) {
  const json j = json::parse(R"({"input_lens": [10, 20, 30], "output_lens": [1, 2, 3],
      "send_ms": [100.0, 50.0, 300.0], "successes": [true, true, false]})");
  StatusOr<ServingWorkload> w = WorkloadFromBenchResult(j, 1, 2.0, "r.json");
  ASSERT_TRUE(w.ok()) << w.status().message();
  ASSERT_EQ(w->prompts.size(), 2u);  // the failed one is not replayed
  EXPECT_EQ(w->prompts[0].size(), 20u);  // sorted by send time
  EXPECT_EQ(w->output_tokens[1], 1);
  EXPECT_DOUBLE_EQ(w->arrival_s[1], 0.1);  // 50 ms later, times 2
  auto error = [](const char* text) {
    StatusOr<ServingWorkload> w = WorkloadFromBenchResult(json::parse(text), 1, 1.0, "r.json");
    return w.ok() ? std::string("ok") : w.status().message();
  };
  EXPECT_NE(error(R"({"input_lens": [1]})").find("output_lens"), std::string::npos);
  EXPECT_NE(error(R"({"input_lens": [1], "output_lens": [1, 2], "send_ms": [0]})").find("length"),
            std::string::npos);
  EXPECT_NE(error(R"({"input_lens": [0], "output_lens": [1], "send_ms": [0]})").find("request 0"),
            std::string::npos);
  EXPECT_NE(error(R"({"input_lens": [5], "output_lens": [1], "send_ms": ["x"]})").find("request 0"),
            std::string::npos);
  EXPECT_NE(error(R"({"input_lens": [], "output_lens": [], "send_ms": []})").find("no successful"),
            std::string::npos);
}

TEST(Serving, DetectsTraceFormats) {
  const std::string dir = ::testing::TempDir() + "/serving_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  EXPECT_EQ(*DetectTraceFormat(write(
                "m.jsonl", R"({"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]})"
                           "\n")),
            "mooncake");
  EXPECT_EQ(*DetectTraceFormat(write("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n")), "azure");
  EXPECT_EQ(*DetectTraceFormat(write("r.json", "{\n  \"input_lens\": []\n}\n")), "result-file");
  EXPECT_NE(DetectTraceFormat(write("x.txt", "hello")).status().message().find("--dataset-name"),
            std::string::npos);
  EXPECT_FALSE(DetectTraceFormat(write("e.txt", "")).ok());
  EXPECT_EQ(DetectTraceFormat(dir + "/none").status().code(), StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

TEST(Serving, BadWorkloadsAreErrors) {
  ServingWorkload w = Workload({10}, {1}, {0});
  EXPECT_FALSE(SimulateServing(w, Rates(10, 10), {.capacity_blocks = 0}).ok());
  w.arrival_s.clear();
  EXPECT_FALSE(SimulateServing(w, Rates(10, 10), {.capacity_blocks = 10}).ok());
  loadgen::BenchRequest text;
  text.prompt_text = "hello";
  EXPECT_NE(WorkloadFromBenchRequests("sharegpt", {text}, {}).status().message().find("token ids"),
            std::string::npos);
}

}  // namespace
}  // namespace kvserve::sim

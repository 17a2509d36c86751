// The stacked cost table: capacities against hand-computed KV arithmetic, the steady-state step
// against the cost model, the order and names of the rows, and bad options.
#include "plan/cost_stack.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost/step_time.h"
#include "plot/testing/svg_testing.h"

namespace kvserve::plan {
namespace {

StackResult Stack(const std::string& preset, const StackOptions& o,
                  const std::string& hardware = "h100-sxm") {
  StatusOr<StackResult> s = ComputeCostStack(*PlanModelFromPreset(preset),
                                             *cost::BuiltinHardwareProfile(hardware), o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : StackResult{};
}

TEST(CostStack, Llama70bAt32kNeedsFourH100s) {
  StackOptions o;
  o.context_tokens = 32768;
  o.prompt_tokens = 8192;
  o.output_tokens = 512;
  o.prefix_share = 0.5;
  const StackResult s = Stack("llama-3.3-70b", o);
  // 141 GB of bf16 weights: two H100s (144 GB at 0.9) leave 3 GB, less than one 10.7 GB
  // request (32768 x 80 layers x 8 heads x 128 x 2 x 2 B); four leave 147 GB.
  EXPECT_EQ(s.tensor_parallel, 4);
  ASSERT_EQ(s.rows.size(), 5u);
  const int64_t bytes_per_token = 80 * 8 * 128 * 2 * 2;
  EXPECT_EQ(s.rows[0].kv_bytes_per_request, 32768 * bytes_per_token);
  EXPECT_EQ(s.rows[0].concurrent_requests, s.kv_budget_bytes / (32768 * bytes_per_token));
  // Paged: blocks for 8192 + 256 tokens.
  EXPECT_EQ(s.rows[1].kv_tokens_per_request, 8448);
  EXPECT_EQ(s.rows[1].concurrent_requests, s.kv_budget_bytes / (8448 * bytes_per_token));
  // Prefix cache: half the prompt stored once: 4096 + 256 tokens each, half the prefill.
  EXPECT_EQ(s.rows[2].kv_tokens_per_request, 4352);
  EXPECT_DOUBLE_EQ(s.rows[2].prefill_tokens_per_request, 4096.0);
  // fp8 roughly halves the bytes (per-head scales are per cache, not per token).
  EXPECT_EQ(s.rows[3].kv_dtype, DType::kFp8E4M3);
  EXPECT_EQ(s.rows[3].kv_bytes_per_request, 4352 * bytes_per_token / 2);
  // Eviction: at most 4096 (context / 8) + one block.
  EXPECT_EQ(s.rows[4].kv_tokens_per_request, 4112);
  EXPECT_EQ(s.options.kv_budget_tokens, 4096);
  for (size_t i = 1; i < s.rows.size(); ++i) {
    EXPECT_GE(s.rows[i].concurrent_requests, s.rows[i - 1].concurrent_requests) << i;
  }
  EXPECT_DOUBLE_EQ(s.rows[0].factor, 1.0);
  for (const StackRow& r : s.rows) {
    EXPECT_GT(r.output_tokens_per_s, 0.0) << r.name;
    // $ per million output tokens: 4 devices x $/h over the output rate.
    EXPECT_NEAR(r.cost_per_million_output_tokens,
                4 * s.hardware.price_per_hour / 3600.0 / r.output_tokens_per_s * 1e6, 1e-9);
    EXPECT_NEAR(r.factor,
                s.rows[0].cost_per_million_output_tokens / r.cost_per_million_output_tokens, 1e-9);
  }
}

TEST(CostStack, TheSteadyStepIsTheCostModelsDecodePlusPrefillShare) {
  StackOptions o;
  o.context_tokens = 4096;
  o.prompt_tokens = 1000;
  o.output_tokens = 100;
  o.max_num_seqs = 8;  // binds: 8 requests
  const StackResult s = Stack("llama-3.1-8b", o);
  const StackRow& paged = s.rows[1];
  ASSERT_EQ(paged.concurrent_requests, 8);
  EXPECT_EQ(paged.bound, "--max-num-seqs");
  // 8 decodes at 1000 + 50 tokens, and 8 x 1000 / 100 = 80 prompt tokens per step: one chunk
  // of 80 in the middle of a prompt (offset 460).
  const PlanModel m = *PlanModelFromPreset("llama-3.1-8b");
  const cost::Deployment d = *MakeDeployment(m, PlanKvCacheSpec(m, DType::kBF16, 16),
                                             *cost::BuiltinHardwareProfile("h100-sxm"), 1, 0);
  std::vector<cost::StepSeq> seqs(8, cost::StepSeq{1050, 1, true});
  seqs.push_back({460, 80, false});
  const double step_s = cost::ComputeStepCost(d, seqs).seconds;
  EXPECT_NEAR(paged.tpot_ms, step_s * 1e3, 1e-9);
  EXPECT_NEAR(paged.output_tokens_per_s, 8 / step_s, 1e-6);
  // TTFT: the 1000-token prompt in one chunk (8192 - 8 >= 1000) beside the 8 decodes.
  seqs.back() = {0, 1000, false};
  EXPECT_NEAR(paged.ttft_ms, cost::ComputeStepCost(d, seqs).seconds * 1e3, 1e-9);
}

TEST(CostStack, MlaModelsEndWithTheLatentCache) {
  StackOptions o;
  o.context_tokens = 32768;
  const StackResult s = Stack("deepseek-v2-lite", o);
  ASSERT_EQ(s.rows.size(), 6u);
  EXPECT_EQ(s.rows.back().name, "+ latent KV (MLA)");
  // Expanded: 27 layers x 16 heads x 2 x 192 x 2 B per token; latent: 27 x (512 + 64) x 1 B.
  EXPECT_EQ(s.rows[0].kv_bytes_per_request, int64_t{32768} * 27 * 16 * 2 * 192 * 2);
  EXPECT_LT(s.rows.back().kv_bytes_per_request * 10, s.rows[4].kv_bytes_per_request);
  EXPECT_GT(s.rows.back().factor, s.rows[4].factor);
  EXPECT_EQ(s.options.prompt_tokens, 16384);  // context / 2
  EXPECT_EQ(s.options.output_tokens, 512);
}

TEST(CostStack, JsonHasTheRowsFields) {
  StackOptions o;
  o.context_tokens = 8192;
  const nlohmann::json j = nlohmann::json::parse(FormatStackJson(Stack("llama-3.1-8b", o)));
  ASSERT_EQ(j["rows"].size(), 5u);
  for (const char* field : {"name", "concurrent_requests", "output_tokens_per_s", "ttft_ms",
                            "tpot_ms", "cost_per_million_output_tokens", "factor"}) {
    EXPECT_TRUE(j["rows"][0].contains(field)) << field;
  }
  EXPECT_EQ(j["tensor_parallel"], 1);
  EXPECT_NE(FormatStackText(Stack("llama-3.1-8b", o)).find("+ fp8 KV"), std::string::npos);
  // --plot: two bar panels of five bars each, a background and two frames.
  EXPECT_EQ(plot::testing::CountSvgElements(StackPlotSvg(Stack("llama-3.1-8b", o)), "rect"),
            1 + 2 + 2 * 5);
}

TEST(CostStack, BadOptionsNameTheFlag) {
  const PlanModel m = *PlanModelFromPreset("llama-3.1-8b");
  const cost::HardwareProfile h100 = *cost::BuiltinHardwareProfile("h100-sxm");
  const auto error = [&](StackOptions o) {
    StatusOr<StackResult> s = ComputeCostStack(m, h100, o);
    return s.ok() ? std::string("ok") : s.status().message();
  };
  StackOptions o;
  o.prefix_share = 1.5;
  EXPECT_NE(error(o).find("--prefix-share"), std::string::npos);
  o = {};
  o.context_tokens = 1 << 30;
  EXPECT_NE(error(o).find("--context"), std::string::npos);
  o = {};
  o.context_tokens = 1000;
  o.prompt_tokens = 990;
  o.output_tokens = 20;
  EXPECT_NE(error(o).find("--avg-prompt"), std::string::npos);
  o = {};
  o.max_num_seqs = 0;
  EXPECT_NE(error(o).find("--max-num-seqs"), std::string::npos);
  // The 70B's weights alone overflow one L40S: the flag says how many devices.
  o = {};
  o.context_tokens = 8192;
  o.tensor_parallel = 1;
  StatusOr<StackResult> big = ComputeCostStack(*PlanModelFromPreset("llama-3.3-70b"),
                                               *cost::BuiltinHardwareProfile("l40s"), o);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("do not fit"), std::string::npos);
}

}  // namespace
}  // namespace kvserve::plan

// The step-time model against rooflines computed by hand.
#include "cost/step_time.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace kvserve::cost {
namespace {

// 1e9 layer parameters at 2 bytes, 1 layer x 1 KV head x 128 bf16 (512 bytes per token), on a
// device of 1 TB/s and 1 PFLOP/s with every efficiency 1: a decode reads 2 GB of weights in
// 2 ms; the ridge is at 1000 tokens.
Deployment Simple() {
  Deployment d;
  d.model.name = "simple";
  d.model.num_layers = 1;
  d.model.hidden_dim = 1024;
  d.model.num_heads = 1;
  d.model.attention_qk_dim = 128;
  d.model.attention_v_dim = 128;
  d.model.layer_parameters = 1'000'000'000;
  d.weight_bytes_per_parameter = 2.0;
  d.weight_dtype = DType::kBF16;
  d.kv.num_layers = 1;
  d.kv.num_kv_heads = 1;
  d.kv.head_dim = 128;
  d.kv.dtype = DType::kBF16;
  d.kv.block_size = 16;
  d.hardware.name = "unit";
  d.hardware.memory_bytes = 80'000'000'000;
  d.hardware.memory_bandwidth_bytes_per_s = 1e12;
  d.hardware.peak_flops_bf16 = 1e15;
  d.hardware.efficiency.matmul = EfficiencyCurve::Constant(1.0);
  d.hardware.efficiency.attention_default = EfficiencyCurve::Constant(1.0);
  return d;
}

TEST(StepTime, DecodeOfOneIsTheWeightStream) {
  const Deployment d = Simple();
  ASSERT_TRUE(ValidateDeployment(d).ok());
  const StepCost c = DecodeStepCost(d, 1, 999);
  EXPECT_DOUBLE_EQ(c.matmul.bytes, 2e9);
  EXPECT_DOUBLE_EQ(c.matmul.flops, 2e9);
  EXPECT_DOUBLE_EQ(c.matmul.seconds, 2e-3);  // memory-bound
  EXPECT_DOUBLE_EQ(c.matmul.compute_s, 2e-6);
  // Attention: 1000 keys x 2 x (128 + 128) flops; 1000 tokens read + 1 written x 512 bytes.
  EXPECT_DOUBLE_EQ(c.attention.flops, 512.0 * 1000);
  EXPECT_DOUBLE_EQ(c.attention.bytes, 512.0 * 1001);
  EXPECT_DOUBLE_EQ(c.attention.seconds, 512.0 * 1001 / 1e12);
  EXPECT_DOUBLE_EQ(c.seconds, 2e-3 + 512.0 * 1001 / 1e12);
  EXPECT_EQ(c.num_tokens, 1);
  EXPECT_EQ(c.num_sampled, 1);
}

TEST(StepTime, PrefillCrossesTheRidge) {
  const Deployment d = Simple();
  const std::vector<StepSeq> ridge = {{.num_computed_tokens = 0, .num_new_tokens = 1000}};
  const StepCost at = ComputeStepCost(d, ridge);
  EXPECT_DOUBLE_EQ(at.matmul.compute_s, 2e-3);
  EXPECT_DOUBLE_EQ(at.matmul.memory_s, 2e-3);
  const std::vector<StepSeq> big = {{.num_computed_tokens = 0, .num_new_tokens = 4000}};
  EXPECT_DOUBLE_EQ(ComputeStepCost(d, big).matmul.seconds, 8e-3);  // compute-bound
  // Causal attention over a 4000-token chunk: sum 1..4000 keys.
  EXPECT_DOUBLE_EQ(ComputeStepCost(d, big).attention.flops, 512.0 * 4000 * 4001 / 2);
}

TEST(StepTime, EfficiencyDividesTheRoofline) {
  Deployment d = Simple();
  d.hardware.efficiency.matmul = {{{1, 0.5}, {16, 0.9}}};
  EXPECT_DOUBLE_EQ(DecodeStepCost(d, 1, 0).matmul.seconds, 4e-3);
  EXPECT_NEAR(d.hardware.efficiency.matmul.At(4), 0.7, 1e-12);  // log2-linear
  EXPECT_DOUBLE_EQ(d.hardware.efficiency.matmul.At(1000), 0.9);
  EXPECT_DOUBLE_EQ(d.hardware.efficiency.matmul.At(0.5), 0.5);
  d.hardware.efficiency.step_overhead_s = 1e-3;
  d.hardware.efficiency.token_overhead_s = 1e-6;
  const StepCost c = DecodeStepCost(d, 10, 0);
  EXPECT_DOUBLE_EQ(c.overhead_s, 1e-3 + 10e-6);
}

TEST(StepTime, AttentionFlopsCountEveryLayer) {
  Deployment d = Simple();
  d.model.num_layers = 30;
  d.kv.num_layers = 30;
  // 30 layers x 100 keys x 2 x (128 + 128); 30 x 512 bytes per token, 100 read + 1 written.
  const StepCost c = DecodeStepCost(d, 1, 99);
  EXPECT_DOUBLE_EQ(c.attention.flops, 30.0 * 512 * 100);
  EXPECT_DOUBLE_EQ(c.attention.bytes, 30.0 * 512 * 101);
}

TEST(StepTime, ChunksUseThePrefillAttentionCurve) {
  Deployment d = Simple();
  d.hardware.efficiency.attention_default = EfficiencyCurve::Constant(0.5);
  // No prefill curve: a chunk of 64 over 1000 cached keys at the decode curve (0.5).
  const std::vector<StepSeq> chunk = {{.num_computed_tokens = 1000, .num_new_tokens = 64}};
  const StepCost before = ComputeStepCost(d, chunk);
  // flops 512 x (64 x 1000 + 64 x 65 / 2), bytes 512 x (1064 + 64): memory-bound here.
  const double flops = 512.0 * (64.0 * 1000 + 64.0 * 65 / 2);
  EXPECT_DOUBLE_EQ(before.attention.flops, flops);
  EXPECT_DOUBLE_EQ(before.attention.seconds, 512.0 * 1128 / 1e12 / 0.5);
  // With one: the chunk's 64 rows pick 0.25 (log2-linear between 16 and 256); decode keeps 0.5.
  d.hardware.efficiency.prefill_attention = {{{16, 0.125}, {256, 0.375}}};
  EXPECT_DOUBLE_EQ(ComputeStepCost(d, chunk).attention.seconds, 512.0 * 1128 / 1e12 / 0.25);
  EXPECT_DOUBLE_EQ(DecodeStepCost(d, 1, 999).attention.seconds, 512.0 * 1001 / 1e12 / 0.5);
}

TEST(StepTime, KvBytesAreTheCacheSpecs) {
  Deployment d = Simple();
  for (DType t : {DType::kBF16, DType::kFp8E4M3, DType::kI8, DType::kF32}) {
    d.kv.dtype = t;
    const StepCost c = DecodeStepCost(d, 1, 99);
    EXPECT_DOUBLE_EQ(c.attention.bytes, 101.0 * static_cast<double>(d.kv.bytes_per_token()))
        << DTypeName(t);
  }
  // DeepSeek-V2-Lite's latent: 27 layers x (512 + 64) x 2 bytes.
  d.kv = KvCacheSpec::MlaLatent(27, 512, 64, DType::kBF16, 16);
  EXPECT_EQ(d.kv.bytes_per_token(), 27 * 576 * 2);
  EXPECT_DOUBLE_EQ(DecodeStepCost(d, 1, 9).attention.bytes, 11.0 * 27 * 576 * 2);
}

TEST(StepTime, WindowAndEvictionCapTheContext) {
  Deployment d = Simple();
  d.model.sliding_window_tokens = 12;
  // 5 new queries after 10 cached: keys min(11,12) + 12 x 4 = 59; reads 12, writes 5.
  const std::vector<StepSeq> s = {{.num_computed_tokens = 10, .num_new_tokens = 5}};
  StepCost c = ComputeStepCost(d, s);
  EXPECT_DOUBLE_EQ(c.attention.flops, 512.0 * 59);
  EXPECT_DOUBLE_EQ(c.attention.bytes, 512.0 * (12 + 5));
  d.model.sliding_window_tokens = 0;
  d.kv_budget_tokens = 100;  // holds 100 + one 16-token block
  EXPECT_EQ(AttendedTokens(d, 5000), 116);
  EXPECT_EQ(AttendedTokens(d, 50), 50);
  c = DecodeStepCost(d, 1, 4999);
  EXPECT_DOUBLE_EQ(c.attention.flops, 512.0 * 116);
}

TEST(StepTime, MixtureOfExpertsReadsTheExpertsItsTokensTouch) {
  Deployment d = Simple();
  d.model.num_moe_layers = 1;
  d.model.num_experts = 64;
  d.model.num_experts_used = 6;
  d.model.routed_expert_parameters = 10'000'000;
  const double base = 2e9;
  EXPECT_DOUBLE_EQ(DecodeStepCost(d, 1, 0).matmul.bytes, base + 2.0 * 6 * 1e7);
  const double touched = 64 * (1 - std::pow(58.0 / 64, 10));
  EXPECT_NEAR(DecodeStepCost(d, 10, 0).matmul.bytes, base + 2.0 * touched * 1e7, 1.0);
  // Flops: each token through its 6 experts.
  EXPECT_DOUBLE_EQ(DecodeStepCost(d, 10, 0).matmul.flops, 2.0 * 10 * (1e9 + 6e7));
  EXPECT_EQ(d.model.active_parameters(), 1'060'000'000);
}

TEST(StepTime, TensorParallelSplitsWorkAndAddsAllReduces) {
  Deployment d = Simple();
  d.tensor_parallel = 2;
  EXPECT_FALSE(ValidateDeployment(d).ok());  // no interconnect
  d.hardware.interconnect_bytes_per_s = 1e11;
  ASSERT_TRUE(ValidateDeployment(d).ok());
  const StepCost c = DecodeStepCost(d, 4, 0);
  EXPECT_DOUBLE_EQ(c.matmul.bytes, 1e9);
  // 2 all-reduces x 1 layer x 2 (T-1)/T x 4 tokens x 1024 x 2 bytes / 1e11.
  EXPECT_DOUBLE_EQ(c.comm_s, 2.0 * 1 * 1.0 * 4 * 1024 * 2 / 1e11);
}

TEST(StepTime, OutputProjectionOnlyForSampledRows) {
  Deployment d = Simple();
  d.model.output_parameters = 100'000'000;
  const std::vector<StepSeq> prefill = {{.num_computed_tokens = 0, .num_new_tokens = 64}};
  EXPECT_DOUBLE_EQ(ComputeStepCost(d, prefill).output.seconds, 0.0);
  const std::vector<StepSeq> last = {
      {.num_computed_tokens = 0, .num_new_tokens = 64, .samples = true}};
  EXPECT_DOUBLE_EQ(ComputeStepCost(d, last).output.bytes, 2e8);
  EXPECT_DOUBLE_EQ(ComputeStepCost(d, {}).seconds, 0.0);
}

TEST(StepTime, BadDeploymentsAreNamed) {
  Deployment d = Simple();
  d.model.num_layers = 0;
  EXPECT_NE(ValidateDeployment(d).message().find("num_layers"), std::string::npos);
  d = Simple();
  d.model.num_moe_layers = 2;
  EXPECT_FALSE(ValidateDeployment(d).ok());
  d = Simple();
  d.kv_budget_tokens = -1;
  EXPECT_NE(ValidateDeployment(d).message().find("--kv-budget"), std::string::npos);
}

}  // namespace
}  // namespace kvserve::cost

// The cost model's view of the planner's models: active parameters and attention widths of the
// presets against their published figures, and deployments on a hardware profile.
#include <gtest/gtest.h>

#include "plan/plan_model.h"

namespace kvserve::plan {
namespace {

TEST(CostShape, DenseModelsMultiplyEverythingButTheEmbeddingTable) {
  const PlanModel m = *PlanModelFromPreset("llama-3.1-8b");  // untied embeddings
  const cost::ModelShape& s = m.shape;
  EXPECT_EQ(s.output_parameters, int64_t{128256} * 4096);
  EXPECT_EQ(s.layer_parameters + 2 * s.output_parameters, m.num_parameters);
  EXPECT_EQ(s.attention_qk_dim, 128);
  EXPECT_EQ(s.num_heads, 32);
  EXPECT_EQ(s.num_moe_layers, 0);
  const PlanModel tied = *PlanModelFromPreset("llama-3.2-1b");
  EXPECT_EQ(tied.shape.layer_parameters + tied.shape.output_parameters, tied.num_parameters);
}

TEST(CostShape, DeepSeekV2LiteActivatesAbout2Point4B) {
  const PlanModel m = *PlanModelFromPreset("deepseek-v2-lite");
  const cost::ModelShape& s = m.shape;
  EXPECT_EQ(s.num_moe_layers, 26);  // the first layer is dense
  EXPECT_EQ(s.num_experts, 64);
  EXPECT_EQ(s.num_experts_used, 6);
  EXPECT_EQ(s.attention_qk_dim, 512 + 64);  // absorbed MLA: MQA over the latent
  EXPECT_EQ(s.attention_v_dim, 512);
  // DeepSeek's model card: 15.7B total, 2.4B activated per token.
  EXPECT_NEAR(static_cast<double>(m.num_parameters), 15.7e9, 0.2e9);
  EXPECT_NEAR(static_cast<double>(s.active_parameters()), 2.4e9, 0.15e9);
}

TEST(CostShape, DeploymentOnAProfile) {
  const PlanModel m = *PlanModelFromPreset("llama-3.3-70b");
  const cost::HardwareProfile h100 = *cost::BuiltinHardwareProfile("h100-sxm");
  const KvCacheSpec kv = PlanKvCacheSpec(m, DType::kBF16, 16);
  StatusOr<cost::Deployment> d = MakeDeployment(m, kv, h100, 4, 0);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_DOUBLE_EQ(d->weight_bytes_per_parameter, 2.0);
  // A decode of one at 4-way tensor parallel reads a quarter of the bf16 weights but the
  // embedding table (looked up, not multiplied).
  const cost::StepCost c = cost::DecodeStepCost(*d, 1, 1000);
  const double table_bytes = 2.0 * 128256 * 8192;
  EXPECT_NEAR(c.matmul.bytes + c.output.bytes,
              (static_cast<double>(m.weight_bytes) - table_bytes) / 4, 1e3);
  EXPECT_GT(c.comm_s, 0.0);
  cost::HardwareProfile lonely = h100;
  lonely.interconnect_bytes_per_s = 0;
  EXPECT_FALSE(MakeDeployment(m, kv, lonely, 2, 0).ok());
}

}  // namespace
}  // namespace kvserve::plan

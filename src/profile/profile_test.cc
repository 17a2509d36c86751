// ProfileMachine on a tiny synthetic model: every figure present, in range, and the file it
// writes read back by the cost model as a hardware profile (what `sim --hardware FILE` does).
#include "profile/profile.h"

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "cost/step_time.h"
#include "model/model_loader.h"
#include "model/synthetic.h"

namespace kvserve::profile {
namespace {

class ProfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("kvserve_profile_test_" + std::to_string(::getpid()) + ".gguf"))
                .string();
    SyntheticModelOptions options;
    options.preset = "tiny";
    options.dtype = DType::kQ8_0;
    StatusOr<LoadedModel> made = MakeSyntheticModel(options);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    ASSERT_TRUE(SaveGgufModel(*made, path_, {}).ok());
    StatusOr<LoadedModel> loaded = LoadModel(path_);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    StatusOr<std::unique_ptr<LlamaModel>> model = LlamaModel::Create(std::move(loaded).value());
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(model).value();
    StatusOr<plan::PlanModel> shape = plan::LoadPlanModel(path_);
    ASSERT_TRUE(shape.ok()) << shape.status().ToString();
    shape_ = *shape;
  }
  void TearDown() override { std::filesystem::remove(path_); }

  ProfileOptions SmallOptions() const {
    ProfileOptions o;
    o.name = "test-machine";
    o.matmul_rows = {1, 8, 64};
    o.attention_contexts = {64, 256};
    o.prefill_attention_rows = {16, 32};
    o.prefill_attention_cached_tokens = 64;
    o.kv_dtypes = {DType::kF32, DType::kBF16, DType::kI8};
    o.decode_batches = {1, 4};
    o.prefill_tokens = {16, 64};
    o.read_buffer_bytes = 32 << 20;
    o.repetitions = 2;
    return o;
  }

  std::string path_;
  std::unique_ptr<LlamaModel> model_;
  plan::PlanModel shape_;
};

TEST_F(ProfileTest, MeasuresCeilingsEfficienciesAndOverheads) {
  ThreadPool pool(2);
  ProfileOptions options = SmallOptions();
  std::vector<std::string> stages;
  options.progress = [&](const std::string& stage, int64_t done, int64_t total) {
    EXPECT_LE(done, total);
    if (stages.empty() || stages.back() != stage) stages.push_back(stage);
  };
  StatusOr<ProfileResult> result = ProfileMachine(*model_, shape_, &pool, options);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(stages, (std::vector<std::string>{"ceilings", "matmul", "attention", "engine"}));
  const cost::HardwareProfile& hw = result->profile;
  EXPECT_EQ(hw.name, "test-machine");
  EXPECT_GT(hw.memory_bandwidth_bytes_per_s, 1e8);
  EXPECT_GT(hw.peak_flops_f32, 1e8);
  EXPECT_EQ(hw.compute_dtype, DType::kF32);
  ASSERT_EQ(hw.efficiency.matmul.points.size(), 3u);
  for (const auto& [rows, fraction] : hw.efficiency.matmul.points) {
    EXPECT_GT(fraction, 0.0);
    EXPECT_LE(fraction, 1.5);
  }
  for (const char* dtype : {"f32", "bf16", "int8"}) {
    ASSERT_TRUE(hw.efficiency.attention.count(dtype)) << dtype;
    EXPECT_EQ(hw.efficiency.attention.at(dtype).points.size(), 2u);
  }
  ASSERT_EQ(hw.efficiency.prefill_attention.points.size(), 2u);
  EXPECT_EQ(hw.efficiency.prefill_attention.points[0].first, 16.0);
  EXPECT_EQ(result->measurements["attention"]["prefill_f32"].size(), 2u);
  EXPECT_GE(hw.efficiency.step_overhead_s, 0.0);
  EXPECT_GE(hw.efficiency.token_overhead_s, 0.0);
  EXPECT_EQ(result->measurements["engine_steps"].size(), 4u);
  const double scale = result->measurements["overhead_fit"]["engine_scale"].get<double>();
  EXPECT_GE(scale, 0.5);
  EXPECT_LE(scale, 2.0);
  EXPECT_TRUE(cost::ValidateHardwareProfile(hw).ok());

  // The file form round-trips through the cost model's reader (measurements are carried).
  const nlohmann::json j = ProfileToJson(*result);
  ASSERT_TRUE(j.contains("measurements"));
  StatusOr<cost::HardwareProfile> back = cost::HardwareProfileFromJson(j, "profile.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_DOUBLE_EQ(back->memory_bandwidth_bytes_per_s, hw.memory_bandwidth_bytes_per_s);
  EXPECT_DOUBLE_EQ(back->efficiency.token_overhead_s, hw.efficiency.token_overhead_s);
  EXPECT_EQ(back->efficiency.matmul.points, hw.efficiency.matmul.points);
  EXPECT_EQ(back->efficiency.prefill_attention.points, hw.efficiency.prefill_attention.points);

  // The profile times a decode step of this model, within a factor of the measured one (the
  // roofline plus fitted overheads reproduce what the engine did).
  StatusOr<cost::Deployment> deployment =
      plan::MakeDeployment(shape_, plan::PlanKvCacheSpec(shape_, DType::kF32, 16), hw, 1, 0);
  ASSERT_TRUE(deployment.ok()) << deployment.status().ToString();
  const double predicted = cost::DecodeStepCost(*deployment, 4, 40).seconds;
  double measured = 0;
  for (const auto& step : result->measurements["engine_steps"]) {
    if (step["kind"] == "decode" && step["tokens"] == 4) measured = step["measured_s"];
  }
  ASSERT_GT(measured, 0.0);
  EXPECT_GT(predicted, measured / 4) << "predicted " << predicted << " s, measured " << measured;
  EXPECT_LT(predicted, measured * 4) << "predicted " << predicted << " s, measured " << measured;
}

TEST_F(ProfileTest, RefusesLatentKvModels) {
  ThreadPool pool(1);
  plan::PlanModel mla = shape_;
  mla.kv_layout = KvLayout::kMlaLatent;
  StatusOr<ProfileResult> result = ProfileMachine(*model_, mla, &pool, SmallOptions());
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("MLA"), std::string::npos);
}

}  // namespace
}  // namespace kvserve::profile

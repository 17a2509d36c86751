// The engine-step fit: steps made from a known profile (efficiencies scaled, overheads added)
// are fitted back to that profile; a refit names what it cannot use.
#include "profile/step_fit.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "cost/step_time.h"

namespace kvserve::profile {
namespace {

using nlohmann::json;

TEST(StepFit, ALineWithNonNegativeCoefficients) {
  const auto [a, b] = FitNonNegativeLine({1, 2, 3, 4}, {3, 5, 7, 9});
  EXPECT_NEAR(a, 1.0, 1e-9);
  EXPECT_NEAR(b, 2.0, 1e-9);
  // A falling line fits as its mean with no slope; one through negative a as b alone.
  EXPECT_EQ(FitNonNegativeLine({1, 2, 3}, {3, 2, 1}), std::make_pair(2.0, 0.0));
  const auto [a2, b2] = FitNonNegativeLine({1, 2, 3}, {0, 2, 4});
  EXPECT_EQ(a2, 0.0);
  EXPECT_NEAR(b2, 16.0 / 14.0, 1e-9);
  EXPECT_EQ(FitNonNegativeLine({}, {}), std::make_pair(0.0, 0.0));
}

TEST(StepFit, RecoversTheScaleAndOverheadsTheStepsWereMadeWith) {
  std::vector<double> tokens, measured, roofline;
  for (int k = 1; k <= 40; ++k) {
    tokens.push_back(k % 4 == 0 ? 64.0 * k : k % 8);
    roofline.push_back(0.001 * (1 + k % 5) + 2e-5 * tokens.back());
    measured.push_back(1.3 * roofline.back() + 0.0004 + 3e-6 * tokens.back());
  }
  const EngineFit fit = FitEngineSteps(tokens, measured, roofline);
  EXPECT_NEAR(fit.scale, 1.3, 0.011);
  EXPECT_NEAR(fit.step_s, 0.0004, 1e-4);
  EXPECT_NEAR(fit.token_s, 3e-6, 1e-6);
  EXPECT_LT(fit.median_relative_error, 0.01);
}

TEST(StepFit, BalancedWeightsGiveEachKindOfStepHalf) {
  const std::vector<double> w = BalancedStepWeights({true, false, false, false});
  EXPECT_EQ(w, (std::vector<double>{1.0, 1.0 / 3, 1.0 / 3, 1.0 / 3}));
}

// Many decode steps that want one scale and a few prefill steps that want another (no single
// line fits both): unweighted, the fit follows the decode steps and leaves the prefill steps
// off by far more than the decode ones; balanced, neither kind is left that far off.
TEST(StepFit, BalancedWeightsKeepTheFewPrefillStepsInTheFit) {
  std::vector<double> tokens, measured, roofline;
  std::vector<bool> prefills;
  for (int k = 0; k < 200; ++k) {
    const bool prefill = k % 20 == 0;
    // Rooflines that vary at one token count: only the scale can follow them.
    tokens.push_back(prefill ? 400.0 : 8.0);
    roofline.push_back(prefill ? 0.2 * (1 + k % 3) : 0.01 * (1 + k % 5));
    measured.push_back(roofline.back() * (prefill ? 1.0 : 1.3));  // decode wants scale 1.3
    prefills.push_back(prefill);
  }
  auto worst = [&](const EngineFit& f, bool prefill) {
    double e = 0.0;
    for (size_t k = 0; k < tokens.size(); ++k) {
      if (prefills[k] != prefill) continue;
      const double p = f.scale * roofline[k] + f.step_s + f.token_s * tokens[k];
      e = std::max(e, std::fabs(p - measured[k]) / measured[k]);
    }
    return e;
  };
  const EngineFit plain = FitEngineSteps(tokens, measured, roofline);
  const EngineFit balanced =
      FitEngineSteps(tokens, measured, roofline, BalancedStepWeights(prefills));
  EXPECT_GT(worst(plain, true), 2 * worst(plain, false));
  EXPECT_LT(worst(balanced, true), worst(plain, true));
  EXPECT_LT(std::max(worst(balanced, true), worst(balanced, false)),
            std::max(worst(plain, true), worst(plain, false)));
}

class RefitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<plan::PlanModel> model = plan::PlanModelFromPreset("smollm2-135m");
    ASSERT_TRUE(model.ok()) << model.status().message();
    model_ = *model;
    StatusOr<cost::HardwareProfile> hw = cost::BuiltinHardwareProfile("l40s");
    ASSERT_TRUE(hw.ok());
    profile_ = *hw;
    profile_.efficiency.step_overhead_s = 0.002;  // replaced by the refit
    profile_json_ = cost::HardwareProfileToJson(profile_);
    profile_json_["measurements"] = {{"model", {{"threads", 2}}}, {"matmul", json::array()}};
    log_.header = {.model = "smollm2", .kv_cache_dtype = "f16", .block_size = 16, .threads = 2,
                   .simd_level = "avx2"};
  }

  // Steps of a serving mix timed as 1.25 x the bare roofline + 0.5 ms + 2 us per token.
  void MakeSteps(int n) {
    cost::HardwareProfile bare = profile_;
    bare.efficiency.step_overhead_s = bare.efficiency.token_overhead_s = 0.0;
    StatusOr<cost::Deployment> d = plan::MakeDeployment(
        model_, plan::PlanKvCacheSpec(model_, DType::kF16, 16), bare, 1, 0);
    ASSERT_TRUE(d.ok()) << d.status().message();
    std::mt19937 rng(3);
    for (int k = 0; k < n; ++k) {
      cost::LoggedStep step;
      const int batch = 1 + static_cast<int>(rng() % 12);
      for (int b = 0; b < batch; ++b) step.seqs.push_back({static_cast<int64_t>(rng() % 1500), 1, true});
      if (k % 5 == 0) step.seqs.push_back({0, 64 + static_cast<int64_t>(rng() % 400), true});
      const cost::StepCost c = cost::ComputeStepCost(*d, step.seqs);
      step.seconds = 1.25 * c.seconds + 0.0005 + 2e-6 * static_cast<double>(c.num_tokens);
      log_.steps.push_back(step);
    }
  }

  plan::PlanModel model_;
  cost::HardwareProfile profile_;
  json profile_json_;
  cost::StepLog log_;
};

TEST_F(RefitTest, TheRefittedProfileTimesTheLoggedSteps) {
  MakeSteps(200);
  StatusOr<ProfileResult> refit = RefitToStepLog(profile_json_, model_, log_, "steps.jsonl");
  ASSERT_TRUE(refit.ok()) << refit.status().message();
  const cost::HardwareProfile& hw = refit->profile;
  EXPECT_NEAR(hw.efficiency.step_overhead_s, 0.0005, 1e-4);
  EXPECT_NEAR(hw.efficiency.token_overhead_s, 2e-6, 1e-6);
  const json& fit = refit->measurements["served_step_fit"];
  EXPECT_NEAR(fit["engine_scale"].get<double>(), 1.25, 0.011);
  EXPECT_EQ(fit["num_steps"], 200);
  EXPECT_LT(fit["median_relative_error"].get<double>(), 0.02);
  EXPECT_GT(fit["median_relative_error_before"].get<double>(), 0.05);
  EXPECT_NEAR(fit["predicted_over_measured_total"].get<double>(), 1.0, 0.02);
  EXPECT_TRUE(refit->measurements.contains("matmul"));  // the kernel measurements are kept

  // Each logged step, timed by the refitted profile, is what was measured.
  StatusOr<cost::Deployment> d = plan::MakeDeployment(
      model_, plan::PlanKvCacheSpec(model_, DType::kF16, 16), hw, 1, 0);
  ASSERT_TRUE(d.ok());
  for (size_t k = 0; k < 20; ++k) {
    EXPECT_NEAR(cost::ComputeStepCost(*d, log_.steps[k].seqs).seconds, log_.steps[k].seconds,
                0.03 * log_.steps[k].seconds)
        << k;
  }
}

TEST_F(RefitTest, RefusesWhatItCannotFit) {
  MakeSteps(5);
  StatusOr<ProfileResult> r = RefitToStepLog(profile_json_, model_, log_, "steps.jsonl");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("at least 10"), std::string::npos) << r.status().message();

  MakeSteps(50);
  log_.header.threads = 4;
  r = RefitToStepLog(profile_json_, model_, log_, "steps.jsonl");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("same --threads"), std::string::npos);

  log_.header.threads = 2;
  log_.header.kv_cache_dtype = "f7";
  r = RefitToStepLog(profile_json_, model_, log_, "steps.jsonl");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("kv_cache_dtype"), std::string::npos);

  log_.header.kv_cache_dtype = "f16";
  r = RefitToStepLog(json{{"name", "x"}}, model_, log_, "steps.jsonl");
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace kvserve::profile

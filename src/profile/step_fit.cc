// The engine-step fit (see step_fit.h).
#include "profile/step_fit.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/percentile.h"
#include "cost/step_time.h"
#include "tensor/dtype.h"

namespace kvserve::profile {

using json = nlohmann::json;

double ClampFraction(double f) { return std::clamp(std::isfinite(f) ? f : 1.0, 0.01, 1.5); }

std::pair<double, double> FitNonNegativeLine(const std::vector<double>& x,
                                             const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  if (x.empty()) return {0.0, 0.0};
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sx += x[i];
    sy += y[i];
    sxx += x[i] * x[i];
    sxy += x[i] * y[i];
  }
  const double det = n * sxx - sx * sx;
  double a = 0.0, b = 0.0;
  if (det > 0) {
    b = (n * sxy - sx * sy) / det;
    a = (sy - b * sx) / n;
  }
  if (det <= 0 || b < 0) {
    b = 0.0;
    a = std::max(0.0, sy / n);
  } else if (a < 0) {
    a = 0.0;
    b = sxx > 0 ? std::max(0.0, sxy / sxx) : 0.0;
  }
  return {a, b};
}

std::vector<double> BalancedStepWeights(const std::vector<bool>& prefills) {
  const auto num_prefill = static_cast<double>(std::count(prefills.begin(), prefills.end(), true));
  const double num_decode = static_cast<double>(prefills.size()) - num_prefill;
  std::vector<double> weights;
  weights.reserve(prefills.size());
  for (const bool prefill : prefills) weights.push_back(1.0 / (prefill ? num_prefill : num_decode));
  return weights;
}

EngineFit FitEngineSteps(const std::vector<double>& tokens, const std::vector<double>& measured_s,
                         const std::vector<double>& roofline_s,
                         const std::vector<double>& weights) {
  EngineFit best;
  double best_error = std::numeric_limits<double>::max();
  for (int i = 50; i <= 200; ++i) {
    const double scale = i / 100.0;
    std::vector<double> residual(measured_s.size());
    for (size_t k = 0; k < residual.size(); ++k) residual[k] = measured_s[k] - scale * roofline_s[k];
    const auto [a, b] = FitNonNegativeLine(tokens, residual);
    double error = 0.0;
    std::vector<double> relative;
    for (size_t k = 0; k < residual.size(); ++k) {
      const double predicted = scale * roofline_s[k] + a + b * tokens[k];
      const double r = (predicted - measured_s[k]) / measured_s[k];
      error += (weights.empty() ? 1.0 : weights[k]) * r * r;
      relative.push_back(std::fabs(r));
    }
    if (error < best_error) {
      best_error = error;
      best = {scale, a, b, relative.empty() ? 0.0 : Percentile(relative, 50.0)};
    }
  }
  return best;
}

void ScaleEfficiencies(double factor, cost::Efficiency* e) {
  const auto scale = [&](cost::EfficiencyCurve* c) {
    for (auto& [x, f] : c->points) f = ClampFraction(f * factor);
  };
  scale(&e->matmul);
  scale(&e->attention_default);
  scale(&e->prefill_attention);
  for (auto& [dtype, curve] : e->attention) scale(&curve);
}

StatusOr<ProfileResult> RefitToStepLog(const json& profile_json, const plan::PlanModel& model,
                                       const cost::StepLog& log, const std::string& log_name) {
  KV_ASSIGN_OR_RETURN(cost::HardwareProfile hw,
                      cost::HardwareProfileFromJson(profile_json, "the profile"));
  ProfileResult result;
  result.measurements = profile_json.value("measurements", json::object());
  const json& measured_model = result.measurements.value("model", json::object());
  const int profile_threads = measured_model.value("threads", 0);
  if (profile_threads > 0 && log.header.threads > 0 && profile_threads != log.header.threads) {
    return InvalidArgumentError(
        "the profile was measured on " + std::to_string(profile_threads) +
        " threads but the step log ran on " + std::to_string(log.header.threads) +
        ": profile and serve with the same --threads");
  }
  constexpr size_t kMinSteps = 10;
  if (log.steps.size() < kMinSteps) {
    return InvalidArgumentError(log_name + " has " + std::to_string(log.steps.size()) +
                                " steps; the fit needs at least " + std::to_string(kMinSteps) +
                                " (serve a longer workload)");
  }
  const std::optional<DType> kv_dtype = ParseDType(log.header.kv_cache_dtype);
  if (!kv_dtype) {
    return InvalidArgumentError(log_name + ": unknown kv_cache_dtype '" +
                                log.header.kv_cache_dtype + "'");
  }
  const KvCacheSpec kv = plan::PlanKvCacheSpec(model, *kv_dtype, log.header.block_size);

  // The profile as it is, and without its overheads (the roofline the fit scales).
  KV_ASSIGN_OR_RETURN(cost::Deployment before, plan::MakeDeployment(model, kv, hw, 1, 0));
  cost::HardwareProfile bare = hw;
  bare.efficiency.step_overhead_s = 0.0;
  bare.efficiency.token_overhead_s = 0.0;
  KV_ASSIGN_OR_RETURN(cost::Deployment roofline, plan::MakeDeployment(model, kv, bare, 1, 0));
  std::vector<double> tokens, measured_s, roofline_s;
  std::vector<bool> prefills;
  std::vector<double> before_error;
  double total_measured_s = 0.0, total_before_s = 0.0;
  for (const cost::LoggedStep& step : log.steps) {
    const cost::StepCost r = cost::ComputeStepCost(roofline, step.seqs);
    const double b = cost::ComputeStepCost(before, step.seqs).seconds;
    tokens.push_back(static_cast<double>(r.num_tokens));
    prefills.push_back(std::any_of(step.seqs.begin(), step.seqs.end(),
                                   [](const auto& s) { return s.num_new_tokens > 1; }));
    measured_s.push_back(step.seconds);
    roofline_s.push_back(r.seconds);
    before_error.push_back(std::fabs(b - step.seconds) / step.seconds);
    total_measured_s += step.seconds;
    total_before_s += b;
  }
  const EngineFit fit =
      FitEngineSteps(tokens, measured_s, roofline_s, BalancedStepWeights(prefills));
  hw.efficiency.step_overhead_s = std::min(fit.step_s, 5.0);
  hw.efficiency.token_overhead_s = std::min(fit.token_s, 1.0);
  ScaleEfficiencies(1.0 / fit.scale, &hw.efficiency);
  double total_after_s = 0.0;
  for (size_t k = 0; k < roofline_s.size(); ++k) {
    total_after_s += fit.scale * roofline_s[k] + fit.step_s + fit.token_s * tokens[k];
  }
  hw.description += "; engine terms fitted to " + std::to_string(log.steps.size()) +
                    " served steps";
  result.measurements["served_step_fit"] = {
      {"step_log", log_name},
      {"num_steps", log.steps.size()},
      {"kv_cache_dtype", log.header.kv_cache_dtype},
      {"block_size", log.header.block_size},
      {"threads", log.header.threads},
      {"engine_scale", fit.scale},
      {"step_overhead_s", hw.efficiency.step_overhead_s},
      {"token_overhead_s", hw.efficiency.token_overhead_s},
      {"median_relative_error", fit.median_relative_error},
      {"median_relative_error_before", Percentile(before_error, 50.0)},
      {"predicted_over_measured_total_before", total_before_s / total_measured_s},
      {"predicted_over_measured_total", total_after_s / total_measured_s}};
  KV_RETURN_IF_ERROR(cost::ValidateHardwareProfile(hw));
  result.profile = std::move(hw);
  return result;
}

}  // namespace kvserve::profile

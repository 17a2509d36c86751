// The engine-step fit of a profile: real engine steps, each with its measured seconds, as
//   scale x (the kernels' rooflines at the profile's efficiencies) + a cost per step + a cost
//   per computed token,
// least squares in relative error (a 5 ms decode counts as much as a 100 ms prefill; a refit
// to served steps gives the prefill steps and the decode steps equal total weight,
// BalancedStepWeights), the scale searched over [0.5, 2] by 0.01 and the two costs >= 0
// fitted to what the scaled rooflines leave. `kvserve profile` fits it to steps it runs itself (the engine alone);
// RefitToStepLog fits it again to the steps of a `kvserve serve --step-log` run, so that the
// profile describes the engine as it serves (its HTTP thread, and on a test machine the
// client too, share the cores).
//
// Plain functions; no state.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "cost/hardware.h"
#include "cost/step_log.h"
#include "plan/plan_model.h"
#include "profile/profile.h"

namespace kvserve::profile {

// An efficiency fraction kept in [0.01, 1.5] (1 for NaN or infinity).
double ClampFraction(double f);

// Least squares y = a + b x with a, b >= 0 (a coefficient that fits negative is set to 0 and
// the other refitted alone).
std::pair<double, double> FitNonNegativeLine(const std::vector<double>& x,
                                             const std::vector<double>& y);

struct EngineFit {
  double scale = 1.0;
  double step_s = 0.0;
  double token_s = 0.0;
  double median_relative_error = 0.0;  // |predicted - measured| / measured over the steps
};

// tokens[k], measured_s[k], roofline_s[k]: step k's computed tokens, measured seconds and the
// roofline time at the profile's efficiencies without overheads. weights[k] (empty: all 1):
// step k's weight in the squared relative error that picks the scale.
EngineFit FitEngineSteps(const std::vector<double>& tokens, const std::vector<double>& measured_s,
                         const std::vector<double>& roofline_s,
                         const std::vector<double>& weights = {});

// Weights for FitEngineSteps that give the steps that prefill (some sequence computes more
// than one token) and the decode-only steps equal total weight. A served log has many more
// decode steps than prefill steps; unweighted, the fit matched the decode steps and left the
// prefill steps, which TTFT is made of, 12-21% slow on the very steps it was fitted to
// (docs/cost.md, Validation).
std::vector<double> BalancedStepWeights(const std::vector<bool>& prefills);

// Multiplies every efficiency fraction by `factor` (kept in ClampFraction's range).
void ScaleEfficiencies(double factor, cost::Efficiency* e);

// `profile_json` (a `kvserve profile` file) with its engine terms fitted again to `log`'s
// steps of `model`: efficiencies divided by the new scale, the overheads replaced, and
// measurements["served_step_fit"] saying how many steps, the fit, and the profile's median
// error and total time on those steps before and after. InvalidArgument for a profile that
// does not parse, a log from another thread count than the profile's, or one with fewer than
// 10 steps.
StatusOr<ProfileResult> RefitToStepLog(const nlohmann::json& profile_json,
                                       const plan::PlanModel& model, const cost::StepLog& log,
                                       const std::string& log_name);

}  // namespace kvserve::profile

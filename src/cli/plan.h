// `kvserve plan`: the command line of the KV cache capacity and cost planner. The planner
// itself (presets, model files, the arithmetic and the report) is the kv_plan library
// (plan/plan.h); this registers the flags, resolves the model and prints the report.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "plan/plan.h"

namespace kvserve::cli {

// The command line of `kvserve plan`.
struct PlanCommandOptions {
  std::string preset;
  std::string model_path;
  std::string format = "text";  // text | json
  plan::PlanOptions plan;
};

// Resolves the model, computes and prints the plan on stdout; returns the exit status.
int RunPlanCommand(const PlanCommandOptions& options);

// Registers `kvserve plan` on `app`.
void AddPlanCommand(CLI::App& app, int* exit_code);

}  // namespace kvserve::cli

// `kvserve plan`: the command line of the KV cache capacity and cost planner. The planner
// itself (presets, model files, the arithmetic and the report) is the kv_plan library
// (plan/plan.h); this registers the flags, resolves the model and prints the report.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "loadgen/bench_settings.h"
#include "plan/cost_stack.h"
#include "plan/plan.h"
#include "sim/slo_search.h"

namespace kvserve::cli {

// The command line of `kvserve plan`.
struct PlanCommandOptions {
  std::string preset;
  std::string model_path;
  std::string format = "text";  // text | json
  plan::PlanOptions plan;
  // --stack: the stacked cost table (plan/cost_stack.h) on --hardware.
  bool stack = false;
  std::string hardware;
  double price_per_hour = -1;  // < 0: the profile's
  std::string trace_path;      // Mooncake JSONL: mean lengths and prefix share
  double prefix_share = -1;  // < 0: from the trace, else 0
  plan::StackOptions stack_options;
  std::string plot_path;  // --stack --plot FILE.svg
  // --search: the cheapest configuration that meets the targets (sim/slo_search.h) on the
  // workload bench serve would send (its flags; --trace in its format).
  bool search = false;
  double slo_ttft_p90_ms = 0.0;
  double slo_tpot_p99_ms = 0.0;
  int64_t max_replicas = 8;
  sim::SearchSpace space;  // the grid (--search-* flags; max_replicas is the field above)
  std::string search_chunked = "both";  // --search-chunked-prefill on|off|both
  std::string dataset_name;
  loadgen::BenchSettings workload;
};

// Resolves the model, computes and prints the plan on stdout; returns the exit status.
int RunPlanCommand(const PlanCommandOptions& options);

// Registers `kvserve plan` on `app`.
void AddPlanCommand(CLI::App& app, int* exit_code);

}  // namespace kvserve::cli

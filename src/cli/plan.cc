// `kvserve plan`: flags, model resolution and output (the planner is plan/plan.h; see
// docs/cli.md).
#include "cli/plan.h"

#include <cstdio>
#include <memory>

#include "cli/cli_util.h"

namespace kvserve::cli {

int RunPlanCommand(const PlanCommandOptions& o) {
  StatusOr<plan::PlanModel> model = plan::ResolvePlanModel(o.preset, o.model_path);
  if (!model.ok()) return ReportError(model.status());
  StatusOr<plan::PlanResult> result = plan::ComputePlan(*model, o.plan);
  if (!result.ok()) return ReportError(result.status());
  const std::string text =
      o.format == "json" ? plan::FormatPlanJson(*result) : plan::FormatPlanText(*result);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

void AddPlanCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<PlanCommandOptions>();
  plan::PlanOptions& p = opts->plan;
  std::string presets;
  for (const std::string& name : plan::PlanPresetNames()) {
    presets += (presets.empty() ? "" : ", ") + name;
  }
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "KV cache capacity and cost planner: KV bytes per token and per request, and how many "
      "requests fit in a memory budget with paged blocks vs contiguous max-length reservations, "
      "across KV dtypes.");
  cmd->add_option("--preset", opts->preset, "Built-in model: " + presets);
  cmd->add_option("-m,--model", opts->model_path,
                  "Model: GGUF file (metadata only), Hugging Face folder or its config.json, or a "
                  "llama2.c checkpoint");
  cmd->add_option("--context", p.context_tokens,
                  "Tokens per request (prompt + output; default: the max model length)");
  cmd->add_option("--max-model-len", p.max_model_len,
                  "Tokens a contiguous cache reserves per request (default: the model's maximum "
                  "context)");
  cmd->add_option("--avg-context", p.avg_context_tokens,
                  "Also count requests of this average length with paging");
  cmd->add_option("--kv-cache-dtype", p.kv_cache_dtype,
                  "auto (the model's dtype), f32, f16, bf16, fp8 (= fp8_e4m3), fp8_e5m2, int8")
      ->capture_default_str();
  cmd->add_option("--memory", p.memory,
                  "Total memory for weights + KV (e.g. 80GiB, 141GB); the weights are subtracted "
                  "and the rest is the KV budget");
  cmd->add_option("--kv-cache-memory", p.kv_cache_memory,
                  "The KV budget alone (instead of --memory; no weights subtracted)");
  cmd->add_option("--weights-dtype", p.weights_dtype,
                  "Size the weights at this type instead of as stored: f32, f16, bf16, fp8, int8, "
                  "q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k (with --memory)");
  cmd->add_option("--block-size", p.block_size, "Tokens per KV block")->capture_default_str();
  cmd->add_option("--kv-budget", p.kv_budget_tokens,
                  "Also count requests compressed by token eviction to this many KV tokens "
                  "(serve --kv-eviction ... --kv-budget N)");
  cmd->add_option("--format,--output-format", opts->format, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->callback([opts, exit_code]() { *exit_code = RunPlanCommand(*opts); });
}

}  // namespace kvserve::cli

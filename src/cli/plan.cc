// `kvserve plan`: flags, model resolution and output (the planner is plan/plan.h; see
// docs/cli.md).
#include "cli/plan.h"

#include <cmath>
#include <cstdio>
#include <memory>

#include "base/str_format.h"
#include "cli/cli_util.h"
#include "cli/workload_flags.h"
#include "cost/hardware.h"
#include "sim/serving.h"
#include "sim/sim.h"
#include "sim/slo_search.h"
#include "trace/trace.h"

namespace kvserve::cli {

namespace {

// `plan --stack`: the model on --hardware, with the workload from the flags or --trace.
int RunStack(const PlanCommandOptions& o, const plan::PlanModel& model) {
  if (o.hardware.empty()) return ReportError(InvalidArgumentError("--stack needs --hardware NAME|FILE.json"));
  StatusOr<cost::HardwareProfile> hw = cost::ResolveHardwareProfile(o.hardware);
  if (!hw.ok()) return ReportError(hw.status());
  if (o.price_per_hour >= 0) hw->price_per_hour = o.price_per_hour;
  plan::StackOptions so = o.stack_options;
  so.context_tokens = o.plan.context_tokens;
  so.block_size = o.plan.block_size;
  so.kv_budget_tokens = o.plan.kv_budget_tokens;
  so.baseline_dtype = o.plan.kv_cache_dtype;
  if (o.prefix_share >= 0 && !o.trace_path.empty()) {
    return ReportError(InvalidArgumentError("give --prefix-share or --trace, not both"));
  }
  if (o.prefix_share >= 0) {
    so.prefix_share = o.prefix_share;
    so.prefix_source = "--prefix-share";
  } else if (o.trace_path.empty()) {
    so.prefix_source = "no --trace or --prefix-share";
  }
  if (!o.trace_path.empty()) {
    const int64_t tokens_per_hash_id = o.workload.dataset.tokens_per_hash_id;
    StatusOr<std::vector<TraceRequest>> trace = LoadMooncakeTrace(o.trace_path, tokens_per_hash_id);
    if (!trace.ok()) return ReportError(trace.status());
    sim::SimOptions sim_options;
    sim_options.block_tokens = so.block_size;
    sim_options.hash_block_tokens = tokens_per_hash_id;
    const int64_t context = so.context_tokens > 0 ? so.context_tokens : model.max_context_tokens;
    const sim::TraceSummary t = sim::SummarizeTrace(*trace, sim_options, context);
    if (t.num_requests == t.num_too_long) {
      return ReportError(InvalidArgumentError("no request of --trace fits --context " +
                                              std::to_string(context)));
    }
    so.prefix_share = t.token_hit_rate;
    so.prefix_source = StrFormat("the hit rate of %s in a cache that never evicts", o.trace_path.c_str());
    if (so.prompt_tokens == 0) so.prompt_tokens = std::llround(t.mean_prompt_tokens);
    if (so.output_tokens == 0) so.output_tokens = std::max<int64_t>(1, std::llround(t.mean_output_tokens));
    std::fprintf(stderr,
                 "plan: --trace %s: %lld requests (%lld longer than %lld tokens left out), mean "
                 "prompt %.0f, mean output %.0f tokens, prefix hit rate %.1f%%\n",
                 o.trace_path.c_str(), static_cast<long long>(t.num_requests),
                 static_cast<long long>(t.num_too_long), static_cast<long long>(context),
                 t.mean_prompt_tokens, t.mean_output_tokens, 100.0 * t.token_hit_rate);
  }
  StatusOr<plan::StackResult> stack = plan::ComputeCostStack(model, *hw, so);
  if (!stack.ok()) return ReportError(stack.status());
  const std::string text =
      o.format == "json" ? plan::FormatStackJson(*stack) : plan::FormatStackText(*stack);
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (!o.plot_path.empty()) {
    const Status written = WriteOutputFile("--plot", o.plot_path, plan::StackPlotSvg(*stack));
    if (!written.ok()) return ReportError(written);
    std::fprintf(stderr, "plan: plot written to %s\n", o.plot_path.c_str());
  }
  return 0;
}

// `plan --search`: the grid replayed on the workload.
int RunSearch(const PlanCommandOptions& o) {
  if (o.hardware.empty()) return ReportError(InvalidArgumentError("--search needs --hardware NAME|FILE.json"));
  if (o.trace_path.empty() && o.dataset_name.empty()) {
    return ReportError(InvalidArgumentError("--search needs a workload: --trace FILE or --dataset-name"));
  }
  loadgen::ResolvedBench resolved;
  StatusOr<sim::ServingWorkload> workload =
      sim::BuildServingWorkload(o.workload, o.dataset_name, o.trace_path, &resolved);
  if (!workload.ok()) return ReportError(workload.status());
  sim::SearchOptions so;
  so.engine.preset = o.preset;
  so.engine.model_path = o.model_path;
  so.engine.hardware = o.hardware;
  so.engine.price_per_hour = o.price_per_hour;
  so.engine.tensor_parallel = std::max(1, o.stack_options.tensor_parallel);
  so.engine.memory_utilization = o.stack_options.memory_utilization;
  so.slo_ttft_p90_ms = o.slo_ttft_p90_ms;
  so.slo_tpot_p99_ms = o.slo_tpot_p99_ms;
  so.space = o.space;
  so.space.max_replicas = o.max_replicas;
  so.space.chunked_prefill = o.search_chunked == "on"    ? std::vector<bool>{true}
                             : o.search_chunked == "off" ? std::vector<bool>{false}
                                                         : std::vector<bool>{true, false};
  so.max_concurrency = o.workload.max_concurrency;
  std::unique_ptr<ProgressLine> line;  // one per replica count
  int64_t line_replicas = 0;
  so.progress = [&](int64_t replicas, int64_t done, int64_t total) {
    if (replicas != line_replicas) {
      if (line) line->Finish();
      line = std::make_unique<ProgressLine>(
          StrFormat("search: %lld replica(s)", static_cast<long long>(replicas)), "candidates");
      line_replicas = replicas;
    }
    line->Update(done, total);
  };
  std::fprintf(stderr, "plan: --search over %zu requests (%s)\n", workload->prompts.size(),
               workload->dataset_name.c_str());
  StatusOr<sim::SearchResult> result = sim::SearchConfigurations(*workload, so);
  if (line) line->Finish();
  if (!result.ok()) return ReportError(result.status());
  const std::string text = o.format == "json" ? sim::FormatSearchJson(*result, so)
                                              : sim::FormatSearchText(*result, so);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace

int RunPlanCommand(const PlanCommandOptions& o) {
  if (o.stack && o.search) return ReportError(InvalidArgumentError("give --stack or --search, not both"));
  if (o.search) return RunSearch(o);
  StatusOr<plan::PlanModel> model = plan::ResolvePlanModel(o.preset, o.model_path);
  if (!model.ok()) return ReportError(model.status());
  if (o.stack) return RunStack(o, *model);
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
  cmd->add_flag("--stack", opts->stack,
               "The stacked cost table: contiguous baseline, + paged blocks, + prefix cache, + fp8 "
               "KV, + token eviction (+ latent KV for MLA), each timed by the cost model on "
               "--hardware (docs/cost.md)");
  cmd->add_option("--hardware", opts->hardware,
                  "--stack: a built-in profile (h100-sxm, h200, b200, a100-80gb, l40s, mi300x) or "
                  "a JSON file (kvserve profile)");
  cmd->add_option("--plot", opts->plot_path,
                  "--stack: write the cost stack as SVG bars ($ per million output tokens, "
                  "concurrent requests)");
  cmd->add_option("--price-per-hour", opts->price_per_hour,
                  "--stack: USD per device-hour (default: the profile's dated planning price)");
  cmd->add_option("--tensor-parallel", opts->stack_options.tensor_parallel,
                  "--stack: devices (default: the fewest powers of 2 that hold the weights and "
                  "one --context request)");
  cmd->add_option("--trace", opts->trace_path,
                  "--stack: a Mooncake JSONL trace: mean prompt and output lengths and the prefix "
                  "hit rate");
  cmd->add_option("--prefix-share", opts->prefix_share,
                  "--stack: fraction of prompt tokens the prefix cache holds (instead of --trace)");
  cmd->add_option("--avg-prompt", opts->stack_options.prompt_tokens,
                  "--stack: mean prompt tokens (default: the trace's, else --context / 2)");
  cmd->add_option("--avg-output", opts->stack_options.output_tokens,
                  "--stack: mean output tokens (default: the trace's, else min(512, --context / 8))");
  cmd->add_option("--max-num-seqs", opts->stack_options.max_num_seqs,
                  "--stack: most requests running at once")
      ->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", opts->stack_options.max_num_batched_tokens,
                  "--stack: tokens per step (prompt chunks + decodes)")
      ->capture_default_str();
  cmd->add_option("--memory-utilization", opts->stack_options.memory_utilization,
                  "--stack: fraction of each device's memory for weights + KV")
      ->capture_default_str();
  cmd->add_flag("--search", opts->search,
               "SLO search: replays --trace (or a bench serve dataset) over a grid of KV dtype, "
               "block size, --max-num-seqs, --max-num-batched-tokens, chunked prefill and "
               "eviction budget on 1, 2, ... replicas, and prints the cheapest configuration "
               "that meets --slo-ttft-p90 and --slo-tpot-p99 (docs/cost.md)");
  cmd->add_option("--slo-ttft-p90", opts->slo_ttft_p90_ms, "--search: TTFT p90 target (ms)");
  cmd->add_option("--slo-tpot-p99", opts->slo_tpot_p99_ms, "--search: TPOT p99 target (ms)");
  cmd->add_option("--max-replicas", opts->max_replicas, "--search: most replicas tried")
      ->capture_default_str();
  sim::SearchSpace& grid = opts->space;
  cmd->add_option("--search-kv-cache-dtype", grid.kv_cache_dtypes,
                  "--search: KV dtypes tried (comma-separated; auto = the hardware's)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--search-block-size", grid.block_sizes, "--search: block sizes tried")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--search-max-num-seqs", grid.max_num_seqs, "--search: --max-num-seqs values tried")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--search-max-num-batched-tokens", grid.max_num_batched_tokens,
                  "--search: --max-num-batched-tokens values tried")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--search-chunked-prefill", opts->search_chunked,
                  "--search: chunked prefill on, off or both")
      ->check(CLI::IsMember({"on", "off", "both"}))
      ->capture_default_str();
  cmd->add_option("--search-kv-budget", grid.kv_budgets,
                  "--search: SnapKV budgets tried (0: no eviction; eviction changes outputs, "
                  "which the search does not weigh)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--dataset-name", opts->dataset_name,
                  "--search: bench serve's dataset (random, shared-prefix, mooncake, azure, "
                  "result-file; default: --trace's format)");
  AddWorkloadFlags(cmd, &opts->workload);  // bench serve's, same names and defaults
  cmd->add_option("--format,--output-format", opts->format, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->callback([opts, exit_code]() { *exit_code = RunPlanCommand(*opts); });
}

}  // namespace kvserve::cli

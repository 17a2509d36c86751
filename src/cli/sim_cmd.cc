// `kvserve sim`: the flags, reading the trace file, printing the report. The replay itself is
// the kv_sim library (sim/sim.h; the prediction of bench serve: sim/serving.h).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/kv_eviction_flags.h"
#include "cli/scheduler_flags.h"
#include "cli/workload_flags.h"
#include "loadgen/bench_settings.h"
#include "sim/engine_setup.h"
#include "sim/fleet.h"
#include "sim/serving.h"
#include "sim/sim.h"
#include "trace/trace.h"

namespace kvserve::cli {
namespace {

struct SimCommandFlags {
  std::string trace_path;
  std::string format = "text";  // text | json
  sim::SimOptions sim;
  int64_t replicas = 1;         // > 1: the fleet replay (sim/fleet.h)
  std::string routing = "all";  // a policy name, or all of them
  int64_t affinity_tokens = 1024;
  // The prediction of bench serve (sim/serving.h): on when any of its flags is given.
  bool serving = false;
  bool block_size_given = false;
  bool budget_given = false;  // --max-num-batched-tokens
  loadgen::BenchSettings workload;
  std::string dataset_name;  // "": random, or the --trace file's format
  sim::EngineSetup engine;
  std::string result_file;
  KvEvictionFlags eviction;  // serve's --kv-eviction, --kv-budget, ...
  std::string plot_path;     // --plot FILE.svg
  double request_intake_ms = sim::kDefaultRequestIntakeS * 1e3;
};

// --plot: writes `svg` to the file.
int WritePlot(const std::string& path, const std::string& svg) {
  if (const Status s = WriteOutputFile("--plot", path, svg); !s.ok()) return ReportError(s);
  std::fprintf(stderr, "sim: plot written to %s\n", path.c_str());
  return 0;
}


// The prediction: the workload through one replica timed by the cost model (or the two
// rates), reported as bench serve reports a run.
int RunServing(SimCommandFlags f) {
  sim::SimOptions& o = f.sim;
  if (f.replicas > 1) {
    return ReportError(InvalidArgumentError("--replicas: the bench serve prediction runs one replica"));
  }
  if (o.capacities_blocks.size() > 1) {
    return ReportError(InvalidArgumentError("give one --kv-cache-blocks for a prediction, not a sweep"));
  }
  // serve's defaults where the sweep's differ.
  if (!f.block_size_given) o.block_tokens = 16;
  if (!f.budget_given) o.scheduler.max_num_batched_tokens = 0;
  f.engine.block_size = o.block_tokens;
  f.engine.kv_cache_blocks = o.capacities_blocks.empty() ? 0 : o.capacities_blocks.front();
  sim::ServingOptions serving;
  serving.max_concurrency = f.workload.max_concurrency;
  serving.request_intake_s = f.request_intake_ms / 1e3;
  const bool has_model = !f.engine.preset.empty() || !f.engine.model_path.empty();
  if (has_model || !f.engine.hardware.empty()) {
    StatusOr<sim::Engine> engine = sim::ResolveEngine(f.engine);
    if (!engine.ok()) return ReportError(engine.status());
    o.deployment = engine->deployment;  // token eviction: the replica times the slots held
    serving.capacity_blocks = engine->capacity_blocks;
    std::fprintf(stderr, "sim: %s\n", engine->Describe().c_str());
  } else {
    serving.capacity_blocks = f.engine.kv_cache_blocks > 0 ? f.engine.kv_cache_blocks
                                                           : std::max<int64_t>(1, 10000 * 512 / o.block_tokens);
  }
  loadgen::ResolvedBench resolved;
  StatusOr<sim::ServingWorkload> workload = sim::BuildServingWorkload(f.workload, f.dataset_name, f.trace_path, &resolved);
  if (!workload.ok()) return ReportError(workload.status());
  std::fprintf(stderr, "sim: %zu requests (%s), max concurrency %s\n", workload->prompts.size(),
               workload->dataset_name.c_str(),
               serving.max_concurrency > 0 ? std::to_string(serving.max_concurrency).c_str()
                                           : "unbounded");
  StatusOr<sim::ServingResult> result = sim::SimulateServing(*workload, o, serving);
  if (!result.ok()) return ReportError(result.status());
  result->bench.base_url = "sim:" + (o.deployment ? o.deployment->hardware.name : std::string("rates"));
  result->bench.endpoint = resolved.options.body.endpoint;
  result->bench.model = o.deployment ? o.deployment->model.name : std::string("-");
  result->bench.request_rate_per_s = resolved.options.arrivals.request_rate_per_s;
  result->bench.trace_timestamps = !resolved.options.arrivals.request_rate_per_s &&
                                   workload->dataset_name != "random" &&
                                   workload->dataset_name != "shared-prefix";
  const loadgen::BenchmarkSummary summary = loadgen::Summarize(result->bench);
  nlohmann::json doc = loadgen::BenchResultFileJson(result->bench, summary, f.workload, resolved,
                                                    NowIso8601());
  doc["sim"] = sim::ServingExtrasJson(*result, o);
  if (f.format == "json") {
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    const std::string text = sim::FormatServingText(*result, o);
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  if (!f.plot_path.empty()) {
    if (const int rc = WritePlot(f.plot_path, sim::ServingPlotSvg(*result, o)); rc != 0) return rc;
  }
  if (!f.result_file.empty()) {
    const Status written = WriteOutputFile("--result-file", f.result_file, doc.dump(2) + "\n");
    if (!written.ok()) return ReportError(written);
    std::fprintf(stderr, "sim: results written to %s\n", f.result_file.c_str());
  }
  return 0;
}

// --replicas N: the trace over N replicas for each routing policy.
int RunFleet(const SimCommandFlags& f, const std::vector<TraceRequest>& full_trace) {
  const sim::SimOptions& o = f.sim;
  std::vector<sim::Routing> routings;
  if (f.routing == "all") {
    routings = sim::AllRoutings();
  } else {
    StatusOr<sim::Routing> r = sim::ParseRouting(f.routing);
    if (!r.ok()) return ReportError(r.status());
    routings.push_back(*r);
  }
  if (o.capacities_blocks.size() > 1) {
    return ReportError(InvalidArgumentError(
        "--replicas: give one --kv-cache-blocks (each replica's capacity), not a sweep"));
  }
  const std::vector<TraceRequest> trace = sim::TraceHead(full_trace, o);
  // Default capacity: 10,000 blocks of 512 tokens per replica, in this block size.
  const int64_t capacity = o.capacities_blocks.empty()
                               ? std::max<int64_t>(1, 10000 * 512 / o.block_tokens)
                               : o.capacities_blocks.front();
  sim::SimReport context;
  context.options = o;
  const size_t slash = f.trace_path.find_last_of('/');
  context.trace_name = slash == std::string::npos ? f.trace_path : f.trace_path.substr(slash + 1);
  context.num_requests = static_cast<int64_t>(trace.size());
  for (const TraceRequest& r : trace) context.num_prompt_tokens += r.input_tokens;
  std::vector<sim::FleetRow> rows;
  for (sim::Routing routing : routings) {
    std::fprintf(stderr, "sim: %lld replicas, routing %s ...\n", static_cast<long long>(f.replicas),
                 sim::RoutingName(routing));
    const sim::FleetOptions fo{
        .replicas = f.replicas, .routing = routing, .affinity_tokens = f.affinity_tokens};
    StatusOr<sim::FleetRow> row = sim::SimulateFleet(trace, o, capacity, fo);
    if (!row.ok()) return ReportError(row.status());
    rows.push_back(std::move(row).value());
  }
  const std::string text = f.format == "json" ? sim::FormatFleetJson(rows, context)
                                              : sim::FormatFleetText(rows, context);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

int RunSimCommand(const SimCommandFlags& flags) {
  SimCommandFlags f = flags;
  StatusOr<KvEvictionPolicy> policy = ResolveKvEvictionFlags(f.eviction);
  if (!policy.ok()) return ReportError(policy.status());
  f.sim.kv_policy = *policy;
  if (f.serving) return RunServing(f);
  const sim::SimOptions& o = f.sim;
  if (f.trace_path.empty()) {
    return ReportError(InvalidArgumentError(
        "--trace FILE is required (or a workload to predict: --dataset-name, --hardware)"));
  }
  Status valid = sim::ValidateSimOptions(o);
  if (!valid.ok()) return ReportError(valid);
  StatusOr<std::vector<TraceRequest>> trace = LoadMooncakeTrace(f.trace_path, o.hash_block_tokens);
  if (!trace.ok()) return ReportError(trace.status());
  if (f.replicas < 1) return ReportError(InvalidArgumentError("--replicas must be at least 1"));
  if (f.replicas > 1) return RunFleet(f, *trace);
  StatusOr<sim::SimReport> rep = sim::RunSim(*trace, o);
  if (!rep.ok()) return ReportError(rep.status());
  const size_t slash = f.trace_path.find_last_of('/');
  rep->trace_name = slash == std::string::npos ? f.trace_path : f.trace_path.substr(slash + 1);
  const std::string text = f.format == "json" ? sim::FormatSimJson(*rep) : sim::FormatSimText(*rep);
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (!f.plot_path.empty()) return WritePlot(f.plot_path, sim::SimPlotSvg(*rep));
  return 0;
}

}  // namespace

void AddSimCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<SimCommandFlags>();
  sim::SimOptions* opts = &flags->sim;
  CLI::App* cmd = app.add_subcommand(
      "sim",
      "Replay a request trace (Mooncake JSONL with hash_ids) through the scheduler, KV cache "
      "manager and radix prefix cache, without a model, and report prefix hit rates, evictions and miss "
      "reasons for a range of cache capacities, beside an unbounded cache.");
  cmd->add_option("--trace", flags->trace_path,
                  "Trace file: Mooncake JSONL (the cache sweep, or a prediction); for a "
                  "prediction also an Azure CSV trace or a bench serve result file");
  cmd->add_option("--block-tokens,--block-size", opts->block_tokens, "Tokens per KV block")
      ->capture_default_str();
  cmd->add_option("--hash-block-tokens", opts->hash_block_tokens,
                  "Tokens per trace hash id (Mooncake traces: 512)")
      ->capture_default_str();
  cmd->add_option("--kv-cache-blocks", opts->capacities_blocks,
                  "Cache capacities to replay, in blocks (comma-separated or repeated; default: "
                  "the equivalent of 1k,2k,5k,10k,20k,50k,100k blocks of 512 tokens)")
      ->delimiter(',');
  cmd->add_option("--decode-tokens-per-s", opts->decode_tokens_per_s,
                  "Engine steps per second without prefill (a step lasts 1/this seconds plus its "
                  "prefill tokens / --prefill-tokens-per-s)")
      ->capture_default_str();
  cmd->add_option("--prefill-tokens-per-s", opts->prefill_tokens_per_s,
                  "Engine prefill throughput (prompt and recomputed tokens per second)")
      ->capture_default_str();
  AddSchedulerFlags(cmd, &opts->scheduler);
  AddKvEvictionFlags(cmd, &flags->eviction);
  cmd->add_option("--plot", flags->plot_path,
                  "Write an SVG picture: the hit rate and TTFT against cache capacity (a "
                  "capacity sweep), or the TTFT and TPOT distributions and the blocks in use (a "
                  "prediction)");
  cmd->add_option("--max-model-len", opts->max_model_len,
                  "Prompt + output tokens per request (0: the trace's longest; capped to each "
                  "capacity)")
      ->capture_default_str();
  cmd->add_option("--max-requests", opts->max_requests, "Replay only the first N requests (0: all)")
      ->capture_default_str();
  cmd->add_option("--tenants", opts->tenants,
                  "Give request i the cache salt i % N (tenants never share blocks)")
      ->capture_default_str();
  cmd->add_option("--threads", opts->threads,
                  "Capacities replayed in parallel (0: one thread per core)")
      ->capture_default_str();
  cmd->add_option("--replicas", flags->replicas,
                  "Replay over this many replicas behind a router (each with --kv-cache-blocks "
                  "blocks, default 10,000 of 512 tokens) and compare routing policies")
      ->capture_default_str();
  cmd->add_option("--routing", flags->routing,
                  "With --replicas: round-robin, least-loaded, prefix-affinity (hash of the "
                  "first block), kv-events (longest cached prefix, from the replicas' KV "
                  "events), or all")
      ->capture_default_str();
  cmd->add_option("--affinity-tokens", flags->affinity_tokens,
                  "prefix-affinity: the prompt tokens its routing key hashes")
      ->capture_default_str();
  cmd->add_option("--format,--output-format", flags->format, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  // The prediction of bench serve (sim/serving.h).
  const char* kPredict = "Prediction of bench serve";
  cmd->add_option("--dataset-name", flags->dataset_name,
                  "Predict bench serve on this workload: random, shared-prefix, mooncake, azure "
                  "(with --trace) or result-file (a bench serve --result-file given as --trace: "
                  "its lengths and send times); default: the --trace file's format, else random")
      ->check(CLI::IsMember({"random", "shared-prefix", "mooncake", "azure", "result-file"}))
      ->group(kPredict);
  AddWorkloadFlags(cmd, &flags->workload);  // bench serve's, same names and defaults
  sim::EngineSetup& e = flags->engine;
  cmd->add_option("--preset", e.preset, "Model to time: a built-in (as `kvserve plan --preset`)")
      ->group(kPredict);
  cmd->add_option("-m,--model", e.model_path, "Model to time: GGUF, HF folder or config.json")
      ->group(kPredict);
  cmd->add_option("--hardware", e.hardware,
                  "Hardware profile: h100-sxm, h200, b200, a100-80gb, l40s, mi300x, or a .json "
                  "file (`kvserve profile`)")
      ->group(kPredict);
  cmd->add_option("--price-per-hour", e.price_per_hour,
                  "USD per device-hour (default: the profile's planning figure)")
      ->group(kPredict);
  cmd->add_option("--tensor-parallel", e.tensor_parallel, "Devices per replica")
      ->capture_default_str()
      ->group(kPredict);
  cmd->add_option("--kv-cache-dtype", e.kv_cache_dtype,
                  "auto (the profile's compute dtype), f32, f16, bf16, fp8, fp8_e5m2, int8")
      ->capture_default_str()
      ->group(kPredict);
  cmd->add_option("--kv-cache-memory", e.kv_cache_memory,
                  "KV cache budget, as serve takes it (\"2GiB\"); default: "
                  "--memory-utilization of the devices' memory minus the weights")
      ->group(kPredict);
  cmd->add_option("--memory-utilization", e.memory_utilization,
                  "Fraction of the devices' memory for weights and KV")
      ->capture_default_str()
      ->group(kPredict);
  cmd->add_option("--result-file", flags->result_file,
                  "Write the prediction as bench serve's --result-file JSON (plus \"sim\")")
      ->group(kPredict);
  cmd->add_option("--request-intake-ms", flags->request_intake_ms,
                  "Requests sent at one instant reach the engine this far apart (the client's "
                  "sends, HTTP parsing, tokenizing); an idle engine starts on the first")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1000.0))
      ->group(kPredict);
  cmd->add_flag("--check-invariants", opts->check_invariants,
                "Check the scheduler's and cache manager's invariants after every step (slow)")
      ->group("");
  cmd->callback([flags, cmd, exit_code]() {
    for (const char* flag : {"--dataset-name", "--hardware", "--preset", "--model",
                             "--result-file", "--num-prompts", "--request-rate",
                             "--max-concurrency"}) {
      flags->serving |= cmd->count(flag) > 0;
    }
    flags->block_size_given = cmd->count("--block-size") > 0;
    flags->budget_given = cmd->count("--max-num-batched-tokens") > 0;
    flags->workload.request_rate_given = cmd->count("--request-rate") > 0;
    *exit_code = RunSimCommand(*flags);
  });
}

}  // namespace kvserve::cli

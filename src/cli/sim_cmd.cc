// `kvserve sim`: the flags, reading the trace file, printing the report. The replay itself is
// the kv_sim library (sim/sim.h).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/scheduler_flags.h"
#include "sim/sim.h"
#include "trace/trace.h"

namespace kvserve::cli {
namespace {

struct SimCommandFlags {
  std::string trace_path;
  std::string format = "text";  // text | json
  sim::SimOptions sim;
};

int RunSimCommand(const SimCommandFlags& f) {
  const sim::SimOptions& o = f.sim;
  if (f.trace_path.empty()) return ReportError(InvalidArgumentError("--trace FILE is required"));
  Status valid = sim::ValidateSimOptions(o);
  if (!valid.ok()) return ReportError(valid);
  StatusOr<std::vector<TraceRequest>> trace = LoadMooncakeTrace(f.trace_path, o.hash_block_tokens);
  if (!trace.ok()) return ReportError(trace.status());
  StatusOr<sim::SimReport> rep = sim::RunSim(*trace, o);
  if (!rep.ok()) return ReportError(rep.status());
  const size_t slash = f.trace_path.find_last_of('/');
  rep->trace_name = slash == std::string::npos ? f.trace_path : f.trace_path.substr(slash + 1);
  const std::string text = f.format == "json" ? sim::FormatSimJson(*rep) : sim::FormatSimText(*rep);
  std::fwrite(text.data(), 1, text.size(), stdout);
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
  cmd->add_option("--trace", flags->trace_path, "Trace file (Mooncake JSONL)")->required();
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
  cmd->add_option("--format,--output-format", flags->format, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_flag("--check-invariants", opts->check_invariants,
                "Check the scheduler's and cache manager's invariants after every step (slow)")
      ->group("");
  cmd->callback([flags, exit_code]() { *exit_code = RunSimCommand(*flags); });
}

}  // namespace kvserve::cli

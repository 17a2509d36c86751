// `kvserve sim`: the flags, reading the trace file, printing the report. The replay itself is
// the kv_sim library (sim/sim.h).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/scheduler_flags.h"
#include "sim/fleet.h"
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
};

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

int RunSimCommand(const SimCommandFlags& f) {
  const sim::SimOptions& o = f.sim;
  if (f.trace_path.empty()) return ReportError(InvalidArgumentError("--trace FILE is required"));
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
  cmd->add_flag("--check-invariants", opts->check_invariants,
                "Check the scheduler's and cache manager's invariants after every step (slow)")
      ->group("");
  cmd->callback([flags, exit_code]() { *exit_code = RunSimCommand(*flags); });
}

}  // namespace kvserve::cli

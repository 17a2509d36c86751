// `kvserve sim --replicas N --routing P`: a trace replayed over N simulated replicas (each a
// ReplicaSim: the real scheduler and prefix cache, its own clock) behind a router, to compare
// routing policies by the fleet's prefix-cache hit rate and queueing (issue 18, item 5).
//
// Discrete events in time order: a replica with work steps whenever its clock is behind the
// next arrival; an arrival is routed with every replica's state at that moment (an idle
// replica's clock jumps to it). Policies:
//   round-robin      request k of the trace goes to replica k mod N
//   least-loaded     the replica with the fewest running + waiting requests (lowest index on ties)
//   prefix-affinity  a hash of the prompt's first affinity_tokens tokens and its tenant, mod N
//                    (what the nginx recipe of docs/scale-out.md does with a header the client
//                    derives from its prefix; too short a prefix, one every request shares such
//                    as a system prompt, sends everything to one replica)
//   kv-events        a router that follows each replica's KV events (BlockStored / BlockRemoved,
//                    as --kv-events-config publishes them) and sends the request where the
//                    longest prefix of its prompt is cached; ties (no match included) go to the
//                    least loaded (llm-d's and Dynamo's idea, without their load weighting)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "sim/sim.h"

namespace kvserve::sim {

enum class Routing { kRoundRobin, kLeastLoaded, kPrefixAffinity, kKvEvents };
const char* RoutingName(Routing routing);  // "round-robin", ...
// InvalidArgument listing the names for an unknown one.
StatusOr<Routing> ParseRouting(const std::string& name);
std::vector<Routing> AllRoutings();

struct FleetRow {
  Routing routing = Routing::kRoundRobin;
  int64_t replicas = 0;
  // The fleet: every replica's counters summed (hits, misses, evictions, preemptions, tokens),
  // queueing and TTFT over all requests, end_s the last finish.
  SimRow fleet;
  std::vector<int64_t> requests_per_replica;
  std::vector<double> hit_rate_per_replica;  // token hit rate of each replica's requests
  double elapsed_s = 0.0;  // wall time
};

struct FleetOptions {
  int64_t replicas = 4;
  Routing routing = Routing::kRoundRobin;
  int64_t affinity_tokens = 1024;  // prefix-affinity: the prompt tokens its key hashes
};

// Replays `trace` (capacity_blocks per replica). InvalidArgument for bad options.
StatusOr<FleetRow> SimulateFleet(const std::vector<TraceRequest>& trace, const SimOptions& options,
                                 int64_t capacity_blocks, const FleetOptions& fleet_options);

std::string FormatFleetText(const std::vector<FleetRow>& rows, const SimReport& context);
std::string FormatFleetJson(const std::vector<FleetRow>& rows, const SimReport& context);

}  // namespace kvserve::sim

// Test helpers shared by sim/sim_test.cc and cli/sim_cmd_test.cc: small traces and the path
// of the real Mooncake trace (under ../shared/assets; tests skip when it is absent).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "trace/trace.h"

namespace kvserve::sim {

#ifdef KVSERVE_ASSETS_DIR
inline std::string MooncakeTracePath() {
  return std::string(KVSERVE_ASSETS_DIR) + "/traces/mooncake/conversation_trace.jsonl";
}
#endif

// One trace row; timestamps in whole ms.
inline TraceRequest Req(int64_t ts, int64_t in, int64_t out, std::vector<int64_t> ids) {
  return TraceRequest{static_cast<double>(ts), in, out, std::move(ids)};
}

// Multi-turn conversations: every request starts with the shared id 0 (a system prompt);
// a turn extends an earlier turn of its conversation by a few new ids.
inline std::vector<TraceRequest> SyntheticTrace(int num_requests, int64_t hash_block_tokens,
                                                uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int64_t>> conversations;
  std::vector<TraceRequest> trace;
  int64_t next_id = 1;
  int64_t ts = 0;
  for (int i = 0; i < num_requests; ++i) {
    std::vector<int64_t> ids;
    if (conversations.empty() || rng() % 3 == 0) {
      ids = {0};
      conversations.push_back({});
    } else {
      ids = conversations[rng() % conversations.size()];
    }
    for (int k = 1 + static_cast<int>(rng() % 3); k > 0; --k) ids.push_back(next_id++);
    conversations[rng() % conversations.size()] = ids;
    const int64_t n = static_cast<int64_t>(ids.size());
    const int64_t input =
        (n - 1) * hash_block_tokens + 1 + static_cast<int64_t>(rng() % hash_block_tokens);
    ts += static_cast<int64_t>(rng() % 400);
    trace.push_back(Req(ts, input, 1 + static_cast<int64_t>(rng() % 10), ids));
  }
  return trace;
}

}  // namespace kvserve::sim

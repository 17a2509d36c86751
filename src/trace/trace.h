// Request traces: one row per request (arrival time, prompt and output lengths, and for
// Mooncake traces the hash ids of the prompt's blocks), and the one parser of Mooncake JSONL
// traces (https://github.com/kvcache-ai/Mooncake, FAST'25 release: one JSON object per line,
// `timestamp` in ms, `input_length`, `output_length`, `hash_ids`). `kvserve bench serve
// --dataset-name mooncake` (loadgen/dataset.h) and `kvserve sim` (sim/sim.h) both read traces
// here; each turns hash ids into prompt tokens its own way (see their comments).
//
// Plain functions and data; no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvserve {

// Tokens per hash id the Mooncake traces were recorded with.
inline constexpr int64_t kMooncakeTraceBlockTokens = 512;

// One request of a trace.
struct TraceRequest {
  double timestamp_ms = 0.0;  // arrival (Mooncake: ms since the trace's start)
  int64_t input_tokens = 0;   // prompt length
  int64_t output_tokens = 0;  // output length (may be 0)
  // Mooncake: one id per hash block of the prompt (the last block may be partial); equal ids
  // mean equal blocks given equal preceding ids. Empty for traces without them (Azure).
  std::vector<int64_t> hash_ids;
};

// Parses Mooncake JSONL text recorded with `hash_block_tokens` tokens per hash id (blank lines
// and a trailing '\r' skipped). Each line must be a JSON object with a finite `timestamp` >= 0
// (integer or not), integer `input_length` >= 1 and `output_length` >= 0, and a non-empty
// `hash_ids` array of non-negative integers, n of them, with (n - 1) * H < input_length <=
// n * H, and each id at most (2^31 - H) / H, so that id * H + offset fits an int32 token id.
// InvalidArgument naming the line ("trace line 7: ...") otherwise, or when there is no
// request at all.
StatusOr<std::vector<TraceRequest>> ParseMooncakeTrace(std::string_view text,
                                                       int64_t hash_block_tokens);
// Reads the file (NotFound when it cannot be opened), then ParseMooncakeTrace; errors start
// with the path.
StatusOr<std::vector<TraceRequest>> LoadMooncakeTrace(const std::string& path,
                                                      int64_t hash_block_tokens);

}  // namespace kvserve

// Workloads for `kvserve bench serve`: the prompts a benchmark sends (as token id arrays or
// text), their output lengths, and when each one is sent.
//
// Datasets:
//   random         uniform lengths around --random-input-len / --random-output-len
//                  (vLLM's --random-range-ratio), random token ids; an optional common prefix.
//   shared-prefix  G groups x P prompts: each group's prompts start with the same system
//                  prompt, then a question of their own (SGLang's generated-shared-prefix);
//                  the G*P prompts are shuffled.
//   sharegpt       the first human turn of each ShareGPT conversation, as text.
//   mooncake       Mooncake trace replay (trace/trace.h parses it: JSONL of timestamp ms,
//                  input_length, output_length, hash_ids). Hash block b of a prompt is H token
//                  ids drawn from hash_ids[b] alone, so equal hash ids give equal token blocks
//                  and a prefix cache sees the trace's sharing.
//   azure          Azure LLM inference trace (CSV: TIMESTAMP, ContextTokens, GeneratedTokens),
//                  random token ids (no sharing).
//
// Token ids are drawn from [vocab_begin, vocab_end), a range that avoids the special tokens of
// common vocabularies. Text prompts map each id to a common English word (the same id always
// gives the same word, so shared token prefixes stay shared text prefixes); their token count
// on a real tokenizer is then only approximately the intended length.
//
// Plain functions and data; no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "trace/trace.h"

namespace kvserve::loadgen {

// One request of a workload.
struct BenchRequest {
  // Exactly one of the two is the prompt: token ids (when non-empty) or text.
  std::vector<int32_t> prompt_token_ids;
  std::string prompt_text;
  int64_t prompt_len = 0;  // tokens: exact for token ids, an estimate for text
  int64_t output_len = 1;  // max_tokens
  // The dataset fixes the output length: the request asks for ignore_eos.
  bool fixed_output_len = true;
  // Arrival time from the trace (ms since the trace's first request); -1 when none.
  double trace_arrival_ms = -1.0;
};

enum class PromptFormat { kTokenIds, kText };

// Everything the dataset builders read (the `bench serve` flags of the same names).
struct DatasetOptions {
  std::string name = "random";  // random | shared-prefix | sharegpt | mooncake | azure
  std::string dataset_path;     // sharegpt, mooncake, azure
  int64_t num_prompts = 0;      // 0: the dataset's own count (random: 1000)
  uint64_t seed = 0;
  PromptFormat prompt_format = PromptFormat::kTokenIds;
  int32_t vocab_begin = 100;    // token ids drawn from [vocab_begin, vocab_end)
  int32_t vocab_end = 10000;

  // random
  int64_t random_input_len = 1024;
  int64_t random_output_len = 128;
  double random_range_ratio = 0.0;  // lengths uniform in [len*(1-r), len*(1+r)], r in [0, 1)
  int64_t random_prefix_len = 0;    // common prefix added before every prompt

  // shared-prefix (defaults as SGLang's)
  int64_t sp_num_groups = 64;
  int64_t sp_prompts_per_group = 16;
  int64_t sp_system_prompt_len = 2048;
  int64_t sp_question_len = 128;
  int64_t sp_output_len = 256;

  // sharegpt: output length when set (> 0), else the reply's estimated length when the
  // conversation has one, else 256.
  int64_t sharegpt_output_len = 0;

  // mooncake
  int64_t tokens_per_hash_id = kMooncakeTraceBlockTokens;

  // Any dataset: this fraction of the requests (after the first) repeats an earlier request
  // of the run, chosen uniformly (exact repeats, as a response cache sees them). 0: none.
  double repeat_fraction = 0.0;
};

// Replaces about `fraction` of requests[1..] with a copy of a uniformly chosen earlier request
// (keeping the replaced request's trace arrival), deterministically from `seed`.
void ApplyRepeats(double fraction, uint64_t seed, std::vector<BenchRequest>* requests);

// Checks ranges (InvalidArgument naming the flag) and builds the workload. The result is a
// pure function of the options (and the file's contents).
StatusOr<std::vector<BenchRequest>> BuildDataset(const DatasetOptions& options);

// The builders behind BuildDataset (options assumed valid).
std::vector<BenchRequest> GenerateRandomDataset(const DatasetOptions& options);
std::vector<BenchRequest> GenerateSharedPrefixDataset(const DatasetOptions& options);
StatusOr<std::vector<BenchRequest>> ParseShareGptDataset(std::string_view json_text,
                                                         const DatasetOptions& options);

// Azure CSV (header line first; TIMESTAMP as "YYYY-MM-DD hh:mm:ss.fffffff", made relative to
// the first row; no hash ids). Errors name the line. Mooncake traces: ParseMooncakeTrace
// (trace/trace.h).
StatusOr<std::vector<TraceRequest>> ParseAzureTrace(std::string_view text);

// The prompt of a Mooncake row (as ParseMooncakeTrace returns them, recorded at 512
// tokens per hash id): ceil(input_tokens * H / 512) tokens (H = tokens_per_hash_id: the trace
// scaled to H tokens per hash id); token j of hash block b is a hash of (hash_ids[b], j) only,
// mapped into [vocab_begin, vocab_end). Not sim::TracePromptTokens (hash_id * H + j, exact): a
// real server's model must see ids of its vocabulary that avoid special tokens, so the ids are
// hashed into a range, and the benchmark may shrink the trace's prompts; rare collisions
// between blocks do not matter to a load test.
std::vector<int32_t> MooncakePromptTokens(const TraceRequest& row,
                                          int64_t tokens_per_hash_id, int32_t vocab_begin,
                                          int32_t vocab_end);

// The text form of token ids: one common English word per id, space separated.
std::string TokenIdsToText(const std::vector<int32_t>& ids);

// Rough token count of English text (about 4 characters per token; at least 1).
int64_t EstimateTextTokens(std::string_view text);

// When each request is sent.
struct ArrivalOptions {
  // Poisson arrivals at this rate (requests/s); +inf: all at time 0. Unset: a trace's own
  // timestamps when every request has one, else +inf.
  std::optional<double> request_rate_per_s;
  double trace_time_scale = 1.0;  // trace arrival = (timestamp - first) * scale
  uint64_t seed = 0;
};

// Send times in seconds from the benchmark's start, non-decreasing, one per request.
std::vector<double> ComputeArrivalTimes(const std::vector<BenchRequest>& requests,
                                        const ArrivalOptions& options);

}  // namespace kvserve::loadgen

// Prompt-order diagnosis (`kvserve prompt-lint`): finds spans near the start of prompts that
// vary between requests whose later content is shared (a timestamp, a user id, a shuffled tool
// list before a long system prompt), and measures what they cost the prefix cache by replaying
// the prompts, as they are and with each span moved after the shared content, through the real
// radix prefix cache (KvCacheManager).
//
// Detection, per cache namespace (requests with different cache salts never share KV), over
// token lists in file order. K = kgram_tokens, L = min_shared_tokens:
//   1. Every prompt's K-grams (K consecutive tokens at each position) are hashed; a K-gram is
//      "repeated" when at least two prompts of the namespace contain it (anywhere).
//   2. Clusters: a prompt's longest run of consecutive positions whose K-grams repeat (at least
//      L tokens long) is content it shares with other prompts; the prompt joins the cluster of
//      the first prompt (in file order) holding the K-gram in the middle of that run (a
//      union-find, so prompts sharing the same long content end up together however their
//      spans differ). Prompts without such a run are in no cluster.
//   3. Per cluster of at least min_requests prompts: a = the longest prefix common to all its
//      prompts; "common" K-grams = those every prompt of the cluster contains at a position
//      >= a. In the cluster's first prompt, the longest run of positions >= a whose K-grams are
//      common (at least L tokens) is the shared region; its first K-gram is the anchor, and
//      each prompt's shared region starts at its first occurrence of the anchor at or after a
//      (b, per prompt) and extends as long as it equals the first prompt's (verbatim).
//   4. The volatile span of a prompt is [a, b): what differs between the common prefix and the
//      shared region (empty for prompts that have nothing there). A cluster with at least one
//      non-empty span reports one span; a cluster whose prompts share everything, or whose
//      differences come only after the shared content, reports nothing.
// Because a K-gram counts as common only when every prompt of the cluster holds it, a
// coincidence between two prompts (two timestamps ending in the same seconds) does not move
// the boundaries: b is where the content becomes identical for the whole cluster, so the
// differing values' common tail (a closing quote, a newline) is part of the shared region.
// Cost: O(total prompt tokens) time and memory, plus one replay per span reported.
//
// Reordering: a prompt with a non-empty span becomes prefix [0, a) + shared region [b, e) +
// span [a, b) + the rest [e, end), i.e. the span moves to the end of the shared region (just
// before what follows it, typically the request's own question), which is what an
// application moving its timestamp after its system prompt would send.
//
// Hit rates: the prompts (as token lists, in file order) go one at a time through a
// KvCacheManager with the given block size and capacity (unbounded by default: nothing is ever
// evicted): match, start_sequence, allocate_slots, commit every prompt token, free. The hit
// rate is the cached prompt tokens over all prompt tokens, the server's
// prefix_cache_hits_total / prefix_cache_queries_total: whole blocks only, never the last
// prompt token. It is the same cache the engine runs, not a formula.
//
// Plain functions; no state beyond a call.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/ids.h"
#include "base/status.h"

namespace kvserve::promptlint {

// One prompt to analyse, as the server would see it.
struct LintPrompt {
  int64_t line = 0;             // 1-based line of the request file (for the report)
  std::string cache_namespace;  // requests share KV only within one (the cache salt)
  std::vector<TokenId> tokens;  // the rendered, tokenized prompt
};

struct PromptLintOptions {
  int64_t block_size_tokens = 16;  // the prefix cache's block size (serve's --block-size)
  // Prefix-cache capacity of the replays in blocks; 0: unbounded (every block of every
  // prompt fits, so nothing is evicted).
  int64_t capacity_blocks = 0;
  // A shared region must be at least this many tokens long for the span before it to count.
  int64_t min_shared_tokens = 64;
  int64_t kgram_tokens = 16;     // K: the length of the hashed token windows, <= min_shared_tokens
  int64_t min_requests = 2;      // the fewest prompts that make a cluster
  int64_t max_examples = 3;      // differing span values listed per span
  int64_t max_spans = 20;        // spans reported (the ones that cost the most hits first)

  // InvalidArgument naming the field when a value is out of range.
  Status Validate() const;
};

// Decodes token ids to text for the report (null: the ids are listed instead).
using TokenDecoder = std::function<std::string(const std::vector<TokenId>&)>;

// One value a span took: where it is in one prompt and what it holds.
struct SpanExample {
  int64_t line = 0;
  int64_t begin_tokens = 0;  // token offsets in that prompt, [begin, end)
  int64_t end_tokens = 0;
  std::vector<TokenId> tokens;
  std::string text;  // decoded (TokenDecoder), or the ids
};

// A volatile span: a region of one cluster's prompts that differs between them while a long
// region after it is the same in all of them.
struct VolatileSpan {
  std::string cache_namespace;
  int64_t first_line = 0;          // the cluster's first request
  int64_t num_requests = 0;        // prompts whose span is non-empty
  int64_t num_cluster_requests = 0;  // prompts in the cluster (some may have an empty span)
  int64_t begin_tokens = 0;        // a: the same offset in every prompt of the cluster
  int64_t min_end_tokens = 0;      // b ranges over [min_end, max_end] across the prompts
  int64_t max_end_tokens = 0;
  int64_t min_span_tokens = 0;     // non-empty spans' lengths
  int64_t max_span_tokens = 0;
  int64_t shared_tokens = 0;       // the shared region's length common to every prompt
  std::string context_before_text;  // up to 12 tokens before the span (first prompt)
  std::string shared_start_text;    // the first 12 tokens of the shared region
  std::vector<SpanExample> examples;  // distinct values, file order, at most max_examples

  // Replays of the whole file: as it is, and with this span (only) moved after the shared
  // region. cluster_*: the same replays counted over this cluster's prompts only.
  int64_t cached_tokens_before = 0;
  int64_t cached_tokens_after = 0;
  double hit_rate_before = 0.0;
  double hit_rate_after = 0.0;
  double cluster_hit_rate_before = 0.0;
  double cluster_hit_rate_after = 0.0;
};

struct PromptLintReport {
  PromptLintOptions options;
  int64_t num_requests = 0;
  int64_t num_namespaces = 0;
  int64_t num_prompt_tokens = 0;
  int64_t num_clusters = 0;      // clusters of prompts sharing at least min_shared_tokens
  int64_t num_spans_found = 0;   // before the max_spans cut
  // The file as it is, and with every span found moved (clusters are disjoint).
  int64_t cached_tokens = 0;
  double hit_rate = 0.0;
  int64_t cached_tokens_all_reordered = 0;
  double hit_rate_all_reordered = 0.0;
  std::vector<VolatileSpan> spans;  // most tokens gained first, ties by first line
};

// Runs the detection and the replays described in the file comment. InvalidArgument for bad
// options or when a prompt needs more blocks than capacity_blocks.
StatusOr<PromptLintReport> AnalyzePrompts(const std::vector<LintPrompt>& prompts,
                                          const PromptLintOptions& options,
                                          const TokenDecoder& decode = nullptr);

// A replay's result: cached prompt tokens per prompt (same order) and in total.
struct ReplayResult {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  std::vector<int64_t> cached_tokens_per_prompt;
  double hit_rate() const {
    return prompt_tokens > 0 ? static_cast<double>(cached_tokens) / static_cast<double>(prompt_tokens)
                             : 0.0;
  }
};

// Replays `prompts` in order through a KvCacheManager (see the file comment). InvalidArgument
// when a prompt does not fit capacity_blocks.
StatusOr<ReplayResult> ReplayPrefixCache(const std::vector<LintPrompt>& prompts,
                                         int64_t block_size_tokens, int64_t capacity_blocks);

}  // namespace kvserve::promptlint

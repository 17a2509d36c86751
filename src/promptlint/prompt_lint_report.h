// The report of `kvserve prompt-lint` as text (for a person) and as JSON (for scripts).
// Plain functions.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "promptlint/prompt_lint.h"

namespace kvserve::promptlint {

// The totals, then one paragraph per span: where it is, its values (newlines shown as \n,
// long values shortened in the middle), what follows it, and the hit rates before and after.
std::string FormatPromptLintText(const PromptLintReport& report);

// {"requests", "namespaces", "prompt_tokens", "block_size", "capacity_blocks" (0: unbounded),
//  "min_shared_tokens", "kgram_tokens", "clusters", "spans_found", "cached_tokens",
//  "hit_rate", "cached_tokens_all_reordered", "hit_rate_all_reordered",
//  "spans": [{"namespace", "first_line", "requests", "cluster_requests", "begin_tokens",
//             "end_tokens_min", "end_tokens_max", "span_tokens_min", "span_tokens_max",
//             "shared_tokens", "context_before", "shared_start",
//             "examples": [{"line", "begin_tokens", "end_tokens", "text", "token_ids"}],
//             "cached_tokens_before", "cached_tokens_after", "hit_rate_before",
//             "hit_rate_after", "cluster_hit_rate_before", "cluster_hit_rate_after"}]}
// Texts are whole (not shortened); rates are fractions in [0, 1].
nlohmann::ordered_json PromptLintToJson(const PromptLintReport& report);

}  // namespace kvserve::promptlint

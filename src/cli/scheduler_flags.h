// The scheduler flags shared by `serve`, `generate` (with --prompts-file) and `sim`:
// --max-num-seqs, --max-num-batched-tokens, --[no-]enable-chunked-prefill,
// --[no-]enable-prefix-caching, --long-prefill-token-threshold, --scheduling-policy, with one
// help text each. Their values and what they resolve to: runtime/engine_policy.h.
#pragma once

#include <CLI/CLI.hpp>

#include "runtime/engine_policy.h"

namespace kvserve::cli {

// Registers the flags on `cmd` (help group "Scheduler"). `flags`' values at the call are the
// defaults --help shows; `flags` must outlive the parse.
void AddSchedulerFlags(CLI::App* cmd, SchedulerFlags* flags);

}  // namespace kvserve::cli

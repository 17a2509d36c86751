// The token-eviction flags shared by `generate`, `serve` and `eval perplexity`
// (--kv-eviction, --kv-budget, --kv-sink-tokens, --kv-window, --kv-observation-window), turned
// into one validated KvEvictionPolicy (docs/kv-eviction.md).
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "base/status.h"
#include "kv/token_eviction.h"

namespace kvserve::cli {

struct KvEvictionFlags {
  std::string method = "none";
  KvEvictionPolicy policy;  // the numeric fields, as given
  int64_t window_tokens = -1;  // -1: the method's default
};

// Registers the flags on `cmd`; `flags` must outlive the parse.
void AddKvEvictionFlags(CLI::App* cmd, KvEvictionFlags* flags);

// The policy, or InvalidArgument naming the flag (--kv-budget ...).
StatusOr<KvEvictionPolicy> ResolveKvEvictionFlags(const KvEvictionFlags& flags);

}  // namespace kvserve::cli

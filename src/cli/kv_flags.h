// The KV cache flags shared by `generate`, `eval` and `serve` (--kv-cache-dtype, --block-size,
// --kv-cache-memory, --memory-utilization, --max-model-len, --kv-calibration-file), and the
// start-up step that turns them into a PagedKvCache and prints its banner.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "base/status.h"
#include "runtime/kv_cache_config.h"

namespace kvserve::cli {

struct KvCacheFlags {
  KvCacheConfig config;
  std::string kv_cache_memory;  // "4GiB"; parsed into config.memory_bytes
};

// Registers the flags on `cmd`; `flags` must outlive the parse.
void AddKvCacheFlags(CLI::App* cmd, KvCacheFlags* flags);

// Parses kv_cache_memory into the returned config.
StatusOr<KvCacheConfig> ResolveKvCacheFlags(const KvCacheFlags& flags);

// CreatePagedKvCache, then the banner lines on stderr (calibration can take a moment: says so).
// With a `role` ("base", "test"), every line ends with it in parentheses; a non-empty
// `budget_source` replaces the banner's account of how the budget was chosen.
StatusOr<PagedKvCache> CreateKvCacheWithBanner(LlamaModel& model, const Tokenizer* tokenizer,
                                               const KvCacheConfig& config, ThreadPool* pool,
                                               const std::string& role = "",
                                               const std::string& budget_source = "");

}  // namespace kvserve::cli

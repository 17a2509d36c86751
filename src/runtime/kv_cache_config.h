// Sizing and creating the engine's paged KV cache from the user's flags: dtype, block size,
// memory budget, max model length, fp8 scales (from the model file or calibrated).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kv/kv_spec.h"
#include "kv/kv_storage.h"
#include "model/llama.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {

// The flags, as vLLM names them.
struct KvCacheConfig {
  std::string dtype = "auto";         // --kv-cache-dtype
  int64_t block_size = 16;            // --block-size
  int64_t memory_bytes = 0;           // --kv-cache-memory; 0: use memory_utilization
  double memory_utilization = 0.9;    // --memory-utilization: fraction of the memory available
                                      // after weights and workspace; 0: neither flag given,
                                      // size for default_num_sequences instead
  int64_t default_num_sequences = 1;  // with neither budget flag: room for this many
                                      // max_model_len sequences (llama.cpp's n_ctx sizing)
  int64_t max_model_len = 0;          // --max-model-len; 0: the model's context
  int64_t max_num_batched_tokens = 0; // rows of the largest step (workspace); 0: max_model_len
  std::string calibration_file;       // --kv-calibration-file (fp8); empty: built-in text
};

// The engine's paged KV cache: geometry and pages. Owns the pages, not the block ids: those
// belong to the KvCacheManager of the one EngineCore (runtime/engine_core.h) that runs
// sequences on it. Engine thread only.
struct PagedKvCache {
  KvCacheSpec spec;
  int64_t max_model_len = 0;
  std::unique_ptr<KvStorage> storage;
  std::string budget_source;  // how the budget was chosen, for the banner

  int64_t num_blocks() const { return storage->num_blocks(); }
  int64_t capacity_tokens() const { return num_blocks() * spec.block_size; }
  // Start-up banner lines: dtype, scales and their provenance, capacity in tokens, blocks and
  // bytes, and the budget's source.
  std::vector<std::string> Describe() const;
};

// Memory the KV cache may use: memory_bytes when set, else memory_utilization x (available
// memory - weights - workspace), else (utilization 0) default_num_sequences full-length
// sequences. `available_bytes` is injected for tests (the caller passes
// AvailableMemoryBytes()). Errors when the budget cannot hold one max_model_len sequence,
// saying how much is missing.
struct KvBudget {
  int64_t num_blocks = 0;
  std::string source;
};
StatusOr<KvBudget> ComputeKvBudget(const KvCacheSpec& spec, const KvCacheConfig& config,
                                   int64_t max_model_len, int64_t weight_bytes,
                                   int64_t workspace_bytes, int64_t available_bytes);

// Bytes of the forward pass's scratch for a step of `num_tokens` rows.
int64_t ForwardWorkspaceBytes(const ModelConfig& config, int64_t num_tokens);

// Resolves the flags against the model, sizes the budget, allocates the pages, and for fp8
// installs scales: the model file's if it has them, else calibrated on the calibration text
// (tokenized with `tokenizer`, or synthetic token ids when there is none).
StatusOr<PagedKvCache> CreatePagedKvCache(LlamaModel& model, const Tokenizer* tokenizer,
                                          const KvCacheConfig& config, ThreadPool* pool);

}  // namespace kvserve

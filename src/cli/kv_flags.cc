#include "cli/kv_flags.h"

#include <cstdio>

#include "cli/cli_util.h"

namespace kvserve::cli {

void AddKvCacheFlags(CLI::App* cmd, KvCacheFlags* flags) {
  // Without a budget flag, one-shot commands size the cache like llama.cpp's n_ctx.
  flags->config.memory_utilization = 0.0;
  cmd->add_option("--kv-cache-dtype", flags->config.dtype,
                  "KV cache element type: auto (the compute dtype, f32 on CPU), f32, f16, bf16, "
                  "fp8 (= fp8_e4m3), fp8_e4m3, fp8_e5m2, int8")
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2",
                             "int8"}))
      ->capture_default_str();
  cmd->add_option("--block-size", flags->config.block_size, "Tokens per KV block")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--kv-cache-memory", flags->kv_cache_memory,
                  "KV cache budget in bytes, e.g. 4GiB, 512MiB, 2GB (overrides "
                  "--memory-utilization)");
  cmd->add_option("--memory-utilization", flags->config.memory_utilization,
                  "Fraction of the memory available after weights and workspace that the KV "
                  "cache may use (default: room for one --max-model-len sequence)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--max-model-len", flags->config.max_model_len,
                  "Longest sequence (prompt + output) in tokens (default: the model's context)");
  cmd->add_option("--kv-calibration-file", flags->config.calibration_file,
                  "Text to calibrate fp8 KV scales on at start-up (default: built-in text)");
}

StatusOr<KvCacheConfig> ResolveKvCacheFlags(const KvCacheFlags& flags) {
  KvCacheConfig config = flags.config;
  if (!flags.kv_cache_memory.empty()) {
    KV_ASSIGN_OR_RETURN(config.memory_bytes, ParseByteSize(flags.kv_cache_memory));
    if (config.memory_bytes <= 0) return InvalidArgumentError("--kv-cache-memory must be > 0");
  }
  return config;
}

StatusOr<PagedKvCache> CreateKvCacheWithBanner(LlamaModel& model, const Tokenizer* tokenizer,
                                               const KvCacheConfig& config, ThreadPool* pool,
                                               const std::string& role,
                                               const std::string& budget_source) {
  const std::string suffix = role.empty() ? "" : " (" + role + ")";
  auto dtype = ParseKvCacheDtype(config.dtype, DType::kF32);
  if (dtype.ok() && (*dtype == DType::kFp8E4M3 || *dtype == DType::kFp8E5M2)) {
    std::fprintf(stderr, "KV cache%s: fp8 scales: looking in the model file, else calibrating...\n",
                 suffix.c_str());
  }
  KV_ASSIGN_OR_RETURN(PagedKvCache cache, CreatePagedKvCache(model, tokenizer, config, pool));
  if (!budget_source.empty()) cache.budget_source = budget_source;
  for (const std::string& line : cache.Describe()) {
    std::fprintf(stderr, "%s%s\n", line.c_str(), suffix.c_str());
  }
  return cache;
}

}  // namespace kvserve::cli

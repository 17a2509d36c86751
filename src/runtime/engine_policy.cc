#include "runtime/engine_policy.h"

#include <algorithm>
#include <string>

namespace kvserve {

Status ValidateSchedulerFlags(const SchedulerFlags& f) {
  if (f.max_num_seqs < 1) return InvalidArgumentError("--max-num-seqs must be at least 1");
  if (f.max_num_batched_tokens < 0) {
    return InvalidArgumentError("--max-num-batched-tokens must be >= 0 (0: the default budget)");
  }
  if (f.max_num_batched_tokens > 0 && f.max_num_batched_tokens < f.max_num_seqs) {
    return InvalidArgumentError("--max-num-batched-tokens (" +
                                std::to_string(f.max_num_batched_tokens) +
                                ") must be at least --max-num-seqs (" +
                                std::to_string(f.max_num_seqs) + ")");
  }
  if (f.long_prefill_token_threshold < 0) {
    return InvalidArgumentError("--long-prefill-token-threshold must be >= 0");
  }
  return OkStatus();
}

int64_t StepTokenBudget(int64_t flag, int64_t max_num_seqs, bool enable_chunked_prefill,
                        int64_t max_model_len) {
  if (flag > 0) return flag;
  int64_t budget = std::max<int64_t>(2048, max_num_seqs);
  if (!enable_chunked_prefill) budget = std::max(budget, max_model_len);
  return budget;
}

StatusOr<SchedulerConfig> ResolveSchedulerConfig(const SchedulerFlags& f, int64_t max_model_len) {
  KV_RETURN_IF_ERROR(ValidateSchedulerFlags(f));
  SchedulerConfig config;
  config.max_num_batched_tokens = StepTokenBudget(f.max_num_batched_tokens, f.max_num_seqs,
                                                  f.enable_chunked_prefill, max_model_len);
  config.max_num_seqs = f.max_num_seqs;
  config.max_model_len = max_model_len;
  config.enable_chunked_prefill = f.enable_chunked_prefill;
  config.long_prefill_token_threshold = f.long_prefill_token_threshold;
  config.policy = f.policy;
  KV_RETURN_IF_ERROR(config.Validate());
  return config;
}

std::vector<TokenId> EndOfGenerationIds(const Tokenizer& tokenizer, int64_t vocab_size,
                                        bool llama2c) {
  std::vector<TokenId> ids;
  for (TokenId t = 0; t < vocab_size; ++t) {
    if (tokenizer.IsEndOfGeneration(t) || (llama2c && t == tokenizer.bos_id())) ids.push_back(t);
  }
  return ids;
}

StatusOr<EngineConfig> ResolveEngineConfig(const EngineConfigOptions& options,
                                           const LlamaModel& model, const Tokenizer* tokenizer) {
  EngineConfig config;
  config.kv = options.kv;
  const int64_t max_model_len =
      options.kv.max_model_len > 0 ? options.kv.max_model_len : model.config().max_seq_len;
  SchedulerFlags flags = options.scheduler;
  if (options.prompt_in_one_pass && flags.max_num_batched_tokens == 0) {
    flags.max_num_batched_tokens = std::max(max_model_len, flags.max_num_seqs);
  }
  KV_ASSIGN_OR_RETURN(config.core.scheduler, ResolveSchedulerConfig(flags, max_model_len));
  config.core.enable_prefix_caching = flags.enable_prefix_caching;
  config.core.scheduler.model_namespace = model.config().name;
  if (tokenizer != nullptr) {
    const bool llama2c = model.loaded().format.rfind("llama2c", 0) == 0;
    config.core.scheduler.eos_token_ids =
        EndOfGenerationIds(*tokenizer, model.config().vocab_size, llama2c);
  }
  config.kv.default_num_sequences =
      std::max<int64_t>(1, std::min(options.default_num_sequences, flags.max_num_seqs));
  config.kv.max_num_batched_tokens = config.core.scheduler.max_num_batched_tokens;
  return config;
}

}  // namespace kvserve

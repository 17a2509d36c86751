// Tests: an EngineCore over a paged cache for a (shared synthetic) model, the options the
// engine tests start from, and a loop that runs requests to their end.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kv/kv_storage.h"
#include "model/llama.h"
#include "runtime/engine_core.h"

namespace kvserve::testing {

inline PagedKvCache MakeTestCache(const LlamaModel& model, int64_t num_blocks,
                                  int64_t max_model_len, DType dtype, int64_t block_size) {
  PagedKvCache cache;
  cache.spec = model.kv_spec(dtype, block_size);
  cache.max_model_len = max_model_len;
  cache.storage = std::move(KvStorage::Create(cache.spec, num_blocks)).value();
  return cache;
}

// Invariants checked every step, 4 sequences, `step_budget` tokens per step.
inline EngineCoreOptions TestCoreOptions(const PagedKvCache& cache, int64_t step_budget,
                                         bool prefix_caching = true) {
  EngineCoreOptions o;
  o.check_invariants = true;
  o.enable_prefix_caching = prefix_caching;
  o.scheduler.max_model_len = cache.max_model_len;
  o.scheduler.max_num_seqs = 4;
  o.scheduler.max_num_batched_tokens = step_budget;
  return o;
}

inline std::unique_ptr<EngineCore> MakeTestCore(const EngineCoreOptions& options,
                                                LlamaModel& model, PagedKvCache* cache,
                                                ThreadPool* pool) {
  auto core = EngineCore::Create(options, &model, cache, pool);
  EXPECT_TRUE(core.ok()) << core.status().ToString();
  return core.ok() ? std::move(core).value() : nullptr;
}

// A greedy request for max_tokens tokens that ignores EOS.
inline RequestInput GreedyRequest(std::vector<TokenId> prompt, int64_t max_tokens) {
  RequestInput in;
  in.prompt_ids = std::move(prompt);
  in.max_tokens = max_tokens;
  in.sampling.temperature = 0.0f;
  in.ignore_eos = true;
  return in;
}

// Steps until every request has finished; returns every output in order.
inline std::vector<RequestOutput> RunToEnd(EngineCore& core) {
  std::vector<RequestOutput> outs;
  while (core.has_unfinished()) {
    for (RequestOutput& o : core.step().outputs) outs.push_back(std::move(o));
  }
  return outs;
}

}  // namespace kvserve::testing

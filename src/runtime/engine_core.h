// EngineCore: the one path that runs sequences, synchronously on the caller's thread.
// step() = Scheduler::schedule -> ModelRunner::execute -> Scheduler::update (nano-vllm's
// schedule -> run -> postprocess; vLLM V1's EngineCore). The Engine runs it on its own thread
// behind queues for `serve` and `generate --prompts-file`; single-prompt `generate`,
// `eval perplexity`, the greedy tests and the benchmarks call it directly.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_stats.h"
#include "model/llama.h"
#include "runtime/kv_cache_config.h"
#include "kvtier/kv_tier_manager.h"
#include "runtime/kv_compaction.h"
#include "runtime/kv_tier_connector.h"
#include "runtime/model_runner.h"
#include "runtime/request.h"
#include "runtime/scheduler.h"

namespace kvserve {

struct EngineCoreOptions {
  SchedulerConfig scheduler;          // max_model_len is clipped to the cache's
  bool enable_prefix_caching = true;  // --enable-prefix-caching
  // KV_CHECK the scheduler's and cache's invariants after every step (always on in debug
  // builds).
  bool check_invariants = false;
  // Called after every token-eviction compaction (engine thread) with the request and what it
  // kept; for tracing and tests. Unset: nothing.
  std::function<void(SeqId, const KvCompaction&)> on_compaction;
  // The tokenizer's vocabulary as a byte trie (GrammarVocabulary), needed by requests with a
  // grammar (structured output); null: such requests are refused. Engine::Create builds it
  // from its tokenizer.
  std::shared_ptr<const grammar::TokenTrie> grammar_vocabulary;
  // KV events (`--kv-events-config`): when set, the prefix cache records blocks stored and
  // removed, and this gets each step's events (engine thread; only when there are some).
  // It must return quickly (queue them).
  std::function<void(std::vector<KvCacheEvent>)> on_kv_events;
  // KV tiers (`--kv-offload-dir`, `--kv-redis`): not owned, must outlive the core; null: the
  // memory tier only. A waiting request whose prompt continues into a tier is held out of
  // scheduling while its blocks load, at most kv_tier_load_timeout (then it recomputes).
  KvTierManager* kv_tiers = nullptr;
  std::chrono::milliseconds kv_tier_load_timeout{2000};
};

// The work one scheduled request put in a step, as the cost model times it (cost::StepSeq):
// the KV slots attention reads (its computed tokens, fewer once token eviction compacted it),
// the tokens computed, and whether it samples.
struct ScheduledWork {
  int64_t num_kv_slots = 0;
  int64_t num_new_tokens = 0;
  bool samples = false;
};

// What one step() did.
struct EngineCoreStep {
  // Requests scheduled in this step (their first step marks when they left the queue).
  std::vector<SeqId> scheduled_ids;
  // One per request that sampled, returned prompt logits, or finished in this step. When the
  // forward pass fails, every scheduled request ends with kError and the message.
  std::vector<RequestOutput> outputs;
  int64_t num_scheduled_tokens = 0;
  std::chrono::steady_clock::time_point scheduled_time;  // after schedule(), before the run
  std::vector<ScheduledWork> work;  // one per scheduled request, in scheduled_ids' order
};

// Owns the KvCacheManager (the only owner of KV block ids: nothing else allocates from the
// cache's storage), the Scheduler and the ModelRunner. The model, the PagedKvCache (pages and
// geometry) and the thread pool are borrowed and must outlive it. Not thread-safe: one thread
// drives it (ValidateInput() excepted).
// Invariant: once has_unfinished() is false, the cache manager holds no sequence (every block
// free or cached).
class EngineCore {
 public:
  // Fails (InvalidArgument) when the scheduler config is invalid or the cache cannot hold one
  // max_model_len sequence.
  static StatusOr<std::unique_ptr<EngineCore>> Create(const EngineCoreOptions& options,
                                                      LlamaModel* model, PagedKvCache* kv,
                                                      ThreadPool* pool);
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  // InvalidArgument for what would be refused: Scheduler::ValidateInput, and a token outside
  // the vocabulary. Reads only immutable state: safe from any thread.
  Status ValidateInput(const RequestInput& input) const;
  // Queues a request (ValidateInput first); nothing is queued on error.
  Status add_request(SeqId id, RequestInput input);
  // Ends a waiting or running request (stop string found by the caller, abort); its blocks
  // return. False when the id is unknown.
  bool finish_request(SeqId id, FinishReason reason);
  bool abort_request(SeqId id) { return finish_request(id, FinishReason::kAbort); }

  // Runs one step when there is work (has_unfinished()); else returns an empty step.
  EngineCoreStep step();

  bool has_unfinished() const { return scheduler_->has_unfinished(); }
  // KvCacheManager::reset_prefix_cache, and its AllBlocksCleared event published.
  bool reset_prefix_cache();
  const SchedulerConfig& scheduler_config() const { return scheduler_->config(); }
  const Scheduler& scheduler() const { return *scheduler_; }
  const KvCacheManager& kv_manager() const { return *kv_; }
  const PagedKvCache& kv_cache() const { return *kv_cache_; }
  const LlamaModel& model() const { return *model_; }
  // Blocks, bytes and fragmentation right now. O(blocks in use).
  KvMemoryStats memory_stats() const { return kv_->memory_stats(kv_cache_->spec); }
  // The KV footprint of a finished request (its RequestOutput's num_kv_tokens/num_kv_blocks)
  // as memory stats: the blocks it held as "in use", the rest of the cache as it is now.
  KvMemoryStats finished_sequence_memory_stats(const RequestOutput& finished) const;

  // Structured-output requests holding a grammar state (0 once they all finished).
  int64_t num_grammar_states() const { return runner_->num_grammar_states(); }
  // Tokens sampled under a grammar, and the seconds their masks and grammar steps took.
  int64_t num_grammar_tokens_total() const { return runner_->num_grammar_tokens_total(); }
  double grammar_seconds_total() const { return runner_->grammar_seconds_total(); }

  void check_invariants() const { scheduler_->check_invariants(); }

  // KV tiers: the engine side's counters; null without tiers.
  const KvTierConnector* kv_tier_connector() const { return tiers_.get(); }

 private:
  EngineCore(const EngineCoreOptions& options, LlamaModel* model, PagedKvCache* kv,
             ThreadPool* pool);
  // Hands the cache's recorded events to options_.on_kv_events.
  void publish_kv_events();
  // Token eviction after a step: compacts every scheduled request whose policy is due
  // (CompactionDue).
  void compact_due_sequences(const SchedulerOutput& out);

  EngineCoreOptions options_;
  LlamaModel* model_;
  PagedKvCache* kv_cache_;
  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<KvTierConnector> tiers_;  // with options_.kv_tiers
};

}  // namespace kvserve

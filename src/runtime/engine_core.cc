#include "runtime/engine_core.h"

#include <algorithm>
#include <string>
#include <utility>

#include "base/check.h"
#include "runtime/kv_compaction.h"

namespace kvserve {

StatusOr<std::unique_ptr<EngineCore>> EngineCore::Create(const EngineCoreOptions& options,
                                                         LlamaModel* model, PagedKvCache* kv,
                                                         ThreadPool* pool) {
  if (model == nullptr || kv == nullptr || kv->storage == nullptr) {
    return InvalidArgumentError("EngineCore: no model or KV cache");
  }
  EngineCoreOptions o = options;
  if (kv->max_model_len > 0) {
    o.scheduler.max_model_len = std::min(o.scheduler.max_model_len, kv->max_model_len);
  }
  std::unique_ptr<EngineCore> core(new EngineCore(o, model, kv, pool));
  KV_ASSIGN_OR_RETURN(core->scheduler_, Scheduler::Create(core->options_.scheduler,
                                                          core->kv_.get()));
  return core;
}

EngineCore::EngineCore(const EngineCoreOptions& options, LlamaModel* model, PagedKvCache* kv,
                       ThreadPool* pool)
    : options_(options), model_(model), kv_cache_(kv) {
  KvCacheManagerOptions kvo;
  kvo.num_blocks = kv->storage->num_blocks();
  kvo.block_size = kv->spec.block_size;
  kvo.enable_prefix_caching = options.enable_prefix_caching;
  kvo.record_events = options.on_kv_events != nullptr;
  kvo.record_stored_blocks = options.kv_tiers != nullptr;
  kv_ = std::make_unique<KvCacheManager>(kvo);
  if (options.kv_tiers != nullptr) {
    KV_CHECK_EQ(options.kv_tiers->block_bytes(), kv->storage->block_bytes());
    tiers_ = std::make_unique<KvTierConnector>(options.kv_tiers, kv->spec.block_size,
                                               options.kv_tier_load_timeout);
  }
  runner_ = std::make_unique<ModelRunner>(model, kv->storage.get(), pool,
                                          options.grammar_vocabulary);
#ifndef NDEBUG
  options_.check_invariants = true;
#endif
}

Status EngineCore::ValidateInput(const RequestInput& input) const {
  KV_RETURN_IF_ERROR(scheduler_->ValidateInput(input));
  const int64_t vocab_size = model_->config().vocab_size;
  for (TokenId t : input.prompt_ids) {
    if (t < 0 || t >= vocab_size) {
      return InvalidArgumentError("prompt token id " + std::to_string(t) +
                                  " is outside the vocabulary (" + std::to_string(vocab_size) +
                                  " tokens)");
    }
  }
  if (input.grammar != nullptr) {
    if (options_.grammar_vocabulary == nullptr) {
      return InvalidArgumentError("structured output needs the model's tokenizer, which this "
                                  "engine was not given");
    }
    if (options_.grammar_vocabulary->vocab_size() > vocab_size) {
      return InvalidArgumentError("structured output: the tokenizer has more tokens than the "
                                  "model's vocabulary");
    }
  }
  return OkStatus();
}

Status EngineCore::add_request(SeqId id, RequestInput input) {
  KV_RETURN_IF_ERROR(ValidateInput(input));
  return scheduler_->add_request(id, std::move(input));
}

bool EngineCore::finish_request(SeqId id, FinishReason reason) {
  return scheduler_->finish_request(id, reason);
}

void EngineCore::publish_kv_events() {
  if (options_.on_kv_events == nullptr) return;
  std::vector<KvCacheEvent> events = kv_->take_events();
  if (!events.empty()) options_.on_kv_events(std::move(events));
}

bool EngineCore::reset_prefix_cache() {
  const bool done = kv_->reset_prefix_cache();
  publish_kv_events();
  return done;
}

EngineCoreStep EngineCore::step() {
  EngineCoreStep result;
  if (!scheduler_->has_unfinished()) return result;
  if (tiers_) tiers_->before_schedule(scheduler_.get(), kv_.get(), kv_cache_->storage.get());
  const SchedulerOutput out = scheduler_->schedule();
  if (tiers_) tiers_->after_schedule(out, *scheduler_);
  result.scheduled_time = std::chrono::steady_clock::now();
  result.num_scheduled_tokens = out.num_scheduled_tokens;
  if (out.seqs.empty()) return result;
  for (const ScheduledSeq& s : out.seqs) {
    result.scheduled_ids.push_back(s.id);
    const Request* r = scheduler_->request(s.id);
    result.work.push_back({.num_kv_slots = r != nullptr ? r->num_kv_slots() : s.num_computed_tokens,
                           .num_new_tokens = s.num_new_tokens,
                           .samples = s.samples});
  }
  StatusOr<ModelOutput> model = runner_->execute(out, *scheduler_, *kv_);
  if (model.ok()) {
    result.outputs = scheduler_->update(out, *model);
  } else {
    // The step's KV is unusable: every scheduled request ends with the error.
    for (const ScheduledSeq& s : out.seqs) {
      if (!scheduler_->finish_request(s.id, FinishReason::kError)) continue;
      RequestOutput r;
      r.id = s.id;
      r.finish_reason = FinishReason::kError;
      r.error = model.status().message();
      result.outputs.push_back(std::move(r));
    }
    scheduler_->update(out, ModelOutput{});
  }
  // Before compaction's allocations can evict what just entered the prefix cache.
  if (tiers_) tiers_->after_update(kv_.get(), *kv_cache_->storage, &result.outputs);
  compact_due_sequences(out);
  if (options_.check_invariants) scheduler_->check_invariants();
  publish_kv_events();
  return result;
}

void EngineCore::compact_due_sequences(const SchedulerOutput& out) {
  const int64_t block_size = kv_->block_size();
  for (const ScheduledSeq& s : out.seqs) {
    const Request* r = scheduler_->request(s.id);
    if (r == nullptr || r->status() != RequestStatus::kRunning) continue;
    if (!CompactionDue(r->input().kv_policy, r->eviction_progress(), block_size)) continue;
    AttentionMassTracker& tracker = runner_->attention_mass();
    const std::vector<float> mass =
        r->input().kv_policy.method == KvEvictionMethod::kStreaming
            ? std::vector<float>()
            : tracker.packed(s.id, r->num_kv_slots());
    KvCompaction c = CompactSequenceKv(*r, mass, kv_.get(), kv_cache_->storage.get(), model_);
    if (!c.compacted) {  // the pool is short: recompute it later
      scheduler_->preempt_running(s.id);
      continue;
    }
    tracker.compacted(*r, c.kept, c.layout);
    if (options_.on_compaction) options_.on_compaction(s.id, c);
    scheduler_->record_compaction(s.id, c.num_kv_slots, std::move(c.layer_key_begin),
                                  c.num_evicted_tokens);
  }
}

KvMemoryStats EngineCore::finished_sequence_memory_stats(const RequestOutput& finished) const {
  return SequenceKvMemoryStats(kv_cache_->spec, kv_->num_blocks(), finished.num_kv_blocks,
                               finished.num_kv_tokens);
}

}  // namespace kvserve

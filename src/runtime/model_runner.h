// ModelRunner: executes one scheduler step on the real model. Given a SchedulerOutput, the
// scheduler (to read the requests) and the KvCacheManager (their block tables), it builds one
// ForwardBatch, runs LlamaModel::Forward on the KV storage and samples one token for every
// sequence that samples, with that request's own Sampler.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_storage.h"
#include "model/llama.h"
#include "runtime/attention_mass.h"
#include "runtime/scheduler.h"
#include "runtime/structured_decoding.h"
#include "sampling/sampler.h"

namespace kvserve {

// Owns one Sampler per live request (created the first time the request is scheduled, from
// its SamplingParams, so its seed decides its draws; kept across preemptions, dropped when the
// scheduler reports the request finished), the attention statistics token eviction scores
// with (AttentionMassTracker: reset when the scheduler preempts the request, dropped when it
// finishes), each structured-output request's grammar state (StructuredDecoder: kept across
// preemptions, dropped when it finishes) and the logits buffer. Does not own the model, the
// storage or the pool, which must outlive it. Owns nothing of the scheduler. Engine thread
// only, not thread-safe.
class ModelRunner {
 public:
  // grammar_vocabulary: the tokenizer's vocabulary as a trie, for requests with a grammar
  // (null: such requests must not reach execute()).
  ModelRunner(LlamaModel* model, KvStorage* storage, ThreadPool* pool,
              std::shared_ptr<const grammar::TokenTrie> grammar_vocabulary = nullptr);
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  // Runs the step. Errors (Status) when the forward pass fails (nothing sampled then).
  StatusOr<ModelOutput> execute(const SchedulerOutput& out, const Scheduler& scheduler,
                                const KvCacheManager& kv);

  int64_t num_samplers() const { return static_cast<int64_t>(samplers_.size()); }
  // Requests holding a grammar state (0 once every structured-output request finished).
  int64_t num_grammar_states() const {
    return structured_ != nullptr ? structured_->num_sequences() : 0;
  }
  // Structured output so far: tokens sampled under a grammar, seconds spent on their masks.
  int64_t num_grammar_tokens_total() const {
    return structured_ != nullptr ? structured_->num_tokens_total() : 0;
  }
  double grammar_seconds_total() const {
    return structured_ != nullptr ? structured_->seconds_total() : 0.0;
  }
  // What the steps recorded for H2O, SnapKV and PyramidKV (EngineCore compacts with it).
  AttentionMassTracker& attention_mass() { return attention_mass_; }

 private:
  LlamaModel* model_;
  KvStorage* storage_;
  ThreadPool* pool_;
  std::unordered_map<SeqId, std::unique_ptr<Sampler>> samplers_;
  AttentionMassTracker attention_mass_;
  std::unique_ptr<StructuredDecoder> structured_;  // null without a grammar vocabulary
  std::vector<AttentionMassRequest> mass_requests_;
  std::vector<float> logits_;  // [num_logits, vocab_size]
  std::vector<float> raw_row_;  // a row before sampling changed it (for logprobs)
};

}  // namespace kvserve

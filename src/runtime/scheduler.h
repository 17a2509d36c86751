// Scheduler: vLLM V1-style continuous batching under a token budget, with chunked prefill,
// prefix-cache hits and preemption by recompute. Pure CPU logic: testable with a fake runner.
//
// One step:   out = schedule();  model = runner.execute(out);  results = update(out, model);
// No phases: every request has num_computed_tokens catching up with num_tokens(); a step gives
// each scheduled request a number of new tokens (1 for a decode, a chunk of a prompt, or the
// whole prompt). A request "samples" when its chunk reaches the end of its known tokens.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/status.h"
#include "kv/kv_cache_manager.h"
#include "kvtier/kv_block_store.h"
#include "runtime/request.h"

namespace kvserve {

// A request's prefix-cache namespace: the model namespace, and the cache salt when there is
// one (requests of different namespaces never share blocks).
std::string CacheNamespace(const std::string& model_namespace, const std::string& salt);


enum class SchedulingPolicy {
  kFcfs,      // waiting requests by arrival
  kPriority,  // by (priority, arrival): lower priority value first, as vLLM
};

// The flags, as vLLM names them.
struct SchedulerConfig {
  int64_t max_num_batched_tokens = 2048;  // --max-num-batched-tokens: token budget per step
  int64_t max_num_seqs = 256;             // --max-num-seqs: sequences per step
  int64_t max_model_len = 2048;           // --max-model-len: prompt + output tokens
  bool enable_chunked_prefill = true;     // --enable-chunked-prefill
  // --long-prefill-token-threshold: caps one request's tokens in a step (0: no cap beyond the
  // budget). Only with chunked prefill (without it a prompt is computed in one step).
  int64_t long_prefill_token_threshold = 0;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;  // --scheduling-policy
  std::string model_namespace;            // prefix-cache namespace of this model
  // Tokens that end generation unless a request sets ignore_eos (the vocabulary's eos_id and
  // eog_ids).
  std::vector<TokenId> eos_token_ids;

  // InvalidArgument for values that cannot work: non-positive budgets; max_num_batched_tokens
  // < max_num_seqs; without chunked prefill, max_num_batched_tokens < max_model_len (a long
  // prompt could never be scheduled).
  Status Validate() const;
};

// One sequence's share of a step: compute tokens [num_computed_tokens, num_computed_tokens +
// num_new_tokens) of the request's all_token_ids(), writing their KV through its block table
// (KvCacheManager::block_table(id), which already has room for them).
struct ScheduledSeq {
  SeqId id = 0;
  int64_t num_computed_tokens = 0;  // first position to compute (KV before it is cached)
  int64_t num_new_tokens = 0;       // >= 1
  // Reaches the end of its known tokens: sample one token (never for a scoring request).
  bool samples = false;
};

struct SchedulerOutput {
  int64_t step_id = 0;                // update() must get the output of the latest schedule()
  std::vector<ScheduledSeq> seqs;     // running requests (decodes first), then admitted ones
  int64_t num_scheduled_tokens = 0;   // sum of num_new_tokens; <= max_num_batched_tokens
  std::vector<SeqId> preempted_ids;   // preempted in this step (recomputed later)
  std::vector<SeqId> finished_ids;    // finished or aborted since the previous schedule()
                                      // (the runner may drop per-request state)
};

// Logits rows of consecutive prompt positions (RequestInput::prompt_logits_start).
struct PromptLogits {
  int64_t first_position = 0;  // the row of position p predicts prompt token p + 1
  int64_t num_rows = 0;
  std::vector<float> rows;     // [num_rows, vocab_size]
};

// What the model runner produced for a step: one sampled token per sequence that sampled.
struct ModelOutput {
  std::unordered_map<SeqId, TokenId> sampled;
  // For the sequences that sampled and asked for logprobs (RequestInput::logprobs >= 0).
  std::unordered_map<SeqId, SampledLogprobs> logprobs;
  // For the sequences that asked for prompt logits and computed some of those positions.
  std::unordered_map<SeqId, PromptLogits> prompt_logits;
  // Structured output: sequences whose grammar accepted the sampled end-of-generation token
  // (they stop even with ignore_eos), and sequences whose grammar no token could continue
  // (they sampled nothing and end with kError and this message).
  std::unordered_set<SeqId> grammar_stopped;
  std::unordered_map<SeqId, std::string> grammar_errors;
};

// What a step did to one request, for the engine to publish (stream tokens, end streams).
struct RequestOutput {
  SeqId id = 0;
  std::vector<TokenId> new_token_ids;  // the token sampled in this step
  std::vector<SampledLogprobs> logprobs;  // one per new token when the request asked for them
  PromptLogits prompt_logits;          // rows computed in this step (num_rows 0: none)
  FinishReason finish_reason = FinishReason::kNone;  // kNone: still running
  std::string error;                   // with kError: what failed
  TokenId stop_token_id = kNoToken;    // the EOS / stop token that finished it (kept in output)
  int64_t num_cached_prompt_tokens = 0;  // prompt tokens served from the prefix cache
  // Of those, by the tier that held them before the request ran (indexed by KvTier: memory,
  // disk, Redis); set by the engine core's KV tier connector, else all memory.
  int64_t num_cached_prompt_tokens_by_tier[kNumKvTiers] = {};
  // When finished by update(): the sequence's KV footprint just before its blocks returned
  // (tokens holding KV, blocks of its table).
  int64_t num_kv_tokens = 0;
  int64_t num_kv_blocks = 0;
  // Token eviction: tokens whose KV was evicted (mean over layers and KV heads; OpenAI usage
  // kv_tokens_evicted), when finished.
  int64_t num_kv_tokens_evicted = 0;
  bool finished() const { return finish_reason != FinishReason::kNone; }
};

struct SchedulerStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;              // including preempted ones
  int64_t num_preempted_waiting = 0;    // waiting to be recomputed
  int64_t num_preemptions_total = 0;
  int64_t num_steps = 0;                // schedule() calls that scheduled something
  int64_t num_scheduled_tokens_total = 0;
  // Times a waiting request was skipped for a step because a running request was computing
  // the next block of its prompt (see schedule(), step 2).
  int64_t num_prefix_deferrals_total = 0;
};

// Owns every unfinished request (waiting, preempted or running) and drives the
// KvCacheManager (not owned; it must outlive the scheduler and nothing else may start or
// free sequences in it). Engine thread only, no locks.
//
// Token-level stops are handled here: EOS (unless ignore_eos), stop_token_ids, max_tokens and
// max_model_len. Stop strings need text: the engine checks them and calls finish_request().
//
// Policy (schedule()):
//  1. Running requests first, decodes (one token to compute) before prefill chunks, each
//     group in admission order, so that a long prompt never takes the budget its running
//     neighbours' decodes need. A request gets min(tokens to compute,
//     long_prefill_token_threshold, budget left). When blocks run out, the newest running
//     request (highest (priority, arrival) under kPriority) is preempted by recompute: its
//     blocks return (what the prefix cache holds stays cached), its output is kept, and it
//     waits again ahead of younger requests; its prefix-cache lookup then covers its output.
//  2. If nobody was preempted, waiting requests in order (FCFS or priority) while the budget,
//     max_num_seqs and the blocks last: prefix-cache match, can_start (a request that does not
//     fit changes nothing and waits), start_sequence, allocate_slots.
//     Without chunked prefill a request whose uncached tokens exceed the budget left waits
//     (and so does everyone behind it: no overtaking). With prefix caching, a request whose
//     next uncached prompt block is being computed by a running request (same namespace,
//     same tokens) is skipped for this step and may be overtaken: it waits for that KV to be
//     committed instead of computing it a second time (SGLang's in-batch prefix check;
//     vLLM computes such blocks twice).
//
// Invariants (check_invariants): every request is in exactly one of the waiting and running
// queues; running requests, and only they, have a sequence in the KvCacheManager, whose block
// table holds exactly their KV slots (their computed tokens unless token eviction compacted
// it: Request::num_kv_slots); running.size() <= max_num_seqs; the waiting
// queue is sorted by (priority under kPriority, arrival); num_tokens() <= max_model_len; a
// step never exceeds max_num_batched_tokens or max_num_seqs (checked in schedule()).
class Scheduler {
 public:
  // Fails (InvalidArgument) when config.Validate() fails or the cache cannot hold one
  // max_model_len sequence.
  static StatusOr<std::unique_ptr<Scheduler>> Create(const SchedulerConfig& config,
                                                     KvCacheManager* kv);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. InvalidArgument (nothing queued) for a duplicate id or what
  // ValidateInput() refuses. max_tokens beyond max_model_len - prompt_len is clipped: the
  // request ends with kLength at max_model_len tokens. A scoring request (max_tokens 0) ends
  // with kLength once its prompt is computed.
  Status add_request(SeqId id, RequestInput input);
  // What add_request() refuses: an empty prompt, max_tokens < 0 (or 0 without prompt logits),
  // invalid sampling parameters or logprobs, prompt_logits_start outside the prompt, or a
  // prompt that leaves no room for one output token within max_model_len (prompt_len >=
  // max_model_len; at most max_model_len for a scoring request; never truncated). Reads only
  // the config: safe from any thread while no one changes the scheduler's config.
  Status ValidateInput(const RequestInput& input) const;
  // Ends a waiting or running request with `reason` (e.g. kStop for a stop string found by
  // the engine) and frees its blocks. False if the id is unknown (finished or never added).
  bool finish_request(SeqId id, FinishReason reason);
  bool abort_request(SeqId id) { return finish_request(id, FinishReason::kAbort); }

  // A held waiting request is skipped by schedule() (others may overtake it) until released:
  // the engine holds one while its prompt's KV is loaded from a KV tier. False when the id is
  // not a waiting request.
  bool set_held(SeqId id, bool held);
  // Request::block_hashes of a known request (the memo the scheduler keeps).
  const std::vector<uint64_t>& block_hashes(SeqId id, int64_t num_blocks);
  // Waiting requests (preempted ones included), in queue order.
  std::vector<SeqId> waiting_ids() const;
  // Tokens of `r` the prefix cache may serve (a request wanting prompt logits recomputes the
  // positions they come from).
  int64_t max_cached_tokens(const Request& r) const;
  SchedulerOutput schedule();
  // Advances the scheduled requests by their new tokens, commits them to the cache, appends
  // sampled tokens, applies the token-level stop conditions and frees finished requests.
  // Returns one RequestOutput per request that sampled (finished ones included).
  std::vector<RequestOutput> update(const SchedulerOutput& output, const ModelOutput& model);

  // Token eviction that cannot get the blocks for the compacted table
  // (KvCacheManager::can_compact false), between update() and the next schedule(): running
  // request `id` is preempted by recompute (its blocks return; it waits to be recomputed and
  // compressed again), and the next schedule() lists it in preempted_ids.
  void preempt_running(SeqId id);
  // Token eviction, between update() and the next schedule() (EngineCore's compaction): the
  // running request's table was compacted (KvCacheManager::compact) to num_kv_slots slots.
  void record_compaction(SeqId id, int64_t num_kv_slots, std::vector<int64_t> layer_key_begin,
                         int64_t num_evicted_tokens);

  // Null once a request finished or was aborted (they are deleted).
  const Request* request(SeqId id) const;
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  bool has_unfinished() const { return !requests_.empty(); }
  const SchedulerConfig& config() const { return config_; }
  SchedulerStats stats() const;

  // KV_CHECKs the invariants above and the KvCacheManager's. O(requests + blocks).
  void check_invariants() const;

 private:
  Scheduler(const SchedulerConfig& config, KvCacheManager* kv);

  // Tokens to give `r`, which has num_computed_tokens, out of `budget_tokens` (0: none).
  int64_t num_new_tokens(const Request& r, int64_t num_computed_tokens,
                         int64_t budget_tokens) const;
  // Sort key: lower runs first, higher is preempted first.
  bool runs_before(const Request& a, const Request& b) const;
  void insert_waiting(Request* r);
  Request* choose_victim() const;
  // Preempts a running request; if it was already scheduled in `out`, takes it out again
  // and gives its tokens back to *budget_tokens.
  void preempt(Request* victim, SchedulerOutput* out, int64_t* budget_tokens);
  // Whether a step that brings r to num_computed tokens samples: it reaches the end of its
  // known tokens and r is not a scoring request.
  bool samples(const Request& r, int64_t num_computed) const {
    return num_computed == r.num_tokens() && !r.input().is_scoring();
  }
  // Token-level stop conditions after appending `token`.
  FinishReason check_stop(Request* r, TokenId token) const;
  // Removes a request from its queue, frees its sequence and deletes it.
  void remove(Request* r, FinishReason reason);

  SchedulerConfig config_;
  KvCacheManager* kv_;  // not owned
  std::unordered_map<SeqId, std::unique_ptr<Request>> requests_;
  std::deque<Request*> waiting_;   // sorted: front runs next
  std::vector<Request*> running_;  // admission order
  std::vector<SeqId> finished_since_schedule_;
  std::vector<SeqId> preempted_since_schedule_;  // preempt_running's, for the next output
  int64_t next_arrival_seq_ = 0;
  int64_t step_id_ = 0;
  bool step_in_flight_ = false;    // schedule() returned seqs that update() has not seen
  int64_t num_preemptions_total_ = 0;
  int64_t num_prefix_deferrals_total_ = 0;
  int64_t num_steps_ = 0;
  int64_t num_scheduled_tokens_total_ = 0;
};

}  // namespace kvserve

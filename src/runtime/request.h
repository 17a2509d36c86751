// Request: one generation request as the engine sees it: immutable input plus the progress
// the scheduler and model runner make on it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "kv/kv_cache_manager.h"
#include "kv/token_eviction.h"
#include "sampling/sampler.h"
#include "tokenizer/vocab_spec.h"

namespace kvserve {

// kWaiting: never scheduled yet; kRunning: holds a sequence in the KvCacheManager;
// kPreempted: was running, lost its KV (kept its output) and waits to be recomputed;
// kFinished: ended (finish_reason says why) and holds no blocks.
enum class RequestStatus { kWaiting, kRunning, kPreempted, kFinished };
const char* RequestStatusName(RequestStatus status);

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
// OpenAI names: "stop", "length", "abort", "error"; "" for kNone.
const char* FinishReasonName(FinishReason reason);

// What a client asks for. Plain value type.
struct RequestInput {
  std::vector<TokenId> prompt_ids;  // not empty, fewer than max_model_len tokens (at most
                                    // max_model_len for a scoring request, max_tokens == 0)
  SamplingParams sampling;
  // Output tokens (>= 1; clipped at max_model_len). 0 only with prompt_logits_start >= 0: a
  // scoring request, which computes its prompt, returns its logits and ends (kLength) without
  // sampling (the OpenAI completions API's echo with max_tokens 0).
  int64_t max_tokens = 16;
  std::vector<TokenId> stop_token_ids;
  // Stop strings need text, so the scheduler does not check them: the engine's output
  // processing does and then calls Scheduler::finish_request(id, FinishReason::kStop).
  std::vector<std::string> stop;
  bool ignore_eos = false;
  int64_t priority = 0;             // lower runs first under priority scheduling (vLLM)
  std::string cache_salt;           // tenants with different salts never share KV blocks
  // Log-probabilities returned with each output token: -1 none; 0 the sampled token's only;
  // k in 1..kMaxLogprobs also the k most likely tokens.
  int32_t logprobs = -1;
  // >= 0: return the logits rows of prompt positions [prompt_logits_start, num_prompt - 1),
  // row p being the model's distribution of prompt token p + 1 (perplexity, scoring), in the
  // RequestOutputs of the steps that compute them. Such a request reads nothing from the
  // prefix cache (a cached position has no logits), as vLLM does for prompt_logprobs.
  // -1: none.
  int64_t prompt_logits_start = -1;
  // Token eviction (docs/kv-eviction.md): method none keeps every token's KV. Must pass
  // KvEvictionPolicy::Validate().
  KvEvictionPolicy kv_policy;
  // Structured output (runtime/structured_decoding.h): every sampled token is one the grammar
  // allows, and an end-of-generation token only once the grammar is complete. Null: none.
  // Needs an engine with a grammar vocabulary (EngineCoreOptions::grammar_vocabulary).
  std::shared_ptr<const grammar::CompiledGrammar> grammar;

  bool is_scoring() const { return max_tokens == 0 && prompt_logits_start >= 0; }
};

// One request: its input (immutable after creation) and its progress. The Scheduler owns
// every Request and is the only caller of the mutators below (the engine and model runner
// read requests through Scheduler::request()); each mutator is one state transition and
// KV_CHECKs that it is legal. Engine thread only.
// Invariants: all_token_ids() == prompt_ids() followed by output_ids();
// num_cached_tokens <= num_computed_tokens <= num_tokens(); the tokens to compute next are
// num_tokens() - num_computed_tokens (there is no prefill/decode flag: a prefill chunk and a
// decode are the same thing); a waiting or preempted request has num_computed_tokens == 0
// and no KV blocks.
class Request {
 public:
  // `cache_namespace`: the prefix-cache namespace (model namespace plus cache salt).
  Request(SeqId id, RequestInput input, int64_t arrival_seq, std::string cache_namespace);
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  SeqId id() const { return id_; }
  const RequestInput& input() const { return input_; }
  const std::vector<TokenId>& prompt_ids() const { return input_.prompt_ids; }
  const std::vector<TokenId>& output_ids() const { return output_ids_; }
  // Prompt followed by output (the sequence the KV cache holds, plus the last sampled token).
  const std::vector<TokenId>& all_token_ids() const { return all_token_ids_; }

  int64_t num_prompt_tokens() const { return static_cast<int64_t>(input_.prompt_ids.size()); }
  int64_t num_output_tokens() const { return static_cast<int64_t>(output_ids_.size()); }
  int64_t num_tokens() const { return static_cast<int64_t>(all_token_ids_.size()); }

  // Tokens whose KV is in the cache (the block table holds them).
  int64_t num_computed_tokens() const { return num_computed_tokens_; }
  // Tokens served from the prefix cache at the request's latest admission (a multiple of the
  // block size; for a preempted request the lookup covers its output so far too).
  int64_t num_cached_tokens() const { return num_cached_tokens_; }
  // Prompt tokens served from the prefix cache at the first admission (OpenAI usage
  // "cached_tokens").
  int64_t num_cached_prompt_tokens() const { return num_cached_prompt_tokens_; }
  RequestStatus status() const { return status_; }
  FinishReason finish_reason() const { return finish_reason_; }
  // The stop token (EOS or one of stop_token_ids) that finished it, else kNoToken.
  TokenId stop_token_id() const { return stop_token_id_; }
  int64_t num_preemptions() const { return num_preemptions_; }
  // Order of arrival in its scheduler (FCFS key, priority tie-break).
  int64_t arrival_seq() const { return arrival_seq_; }
  std::chrono::steady_clock::time_point arrival_time() const { return arrival_time_; }
  const std::string& cache_namespace() const { return cache_namespace_; }
  // First prompt position whose logits row has not been returned yet (with
  // input().prompt_logits_start >= 0; a recompute after preemption does not return rows twice).
  int64_t prompt_logits_next() const { return prompt_logits_next_; }

  bool is_finished() const { return status_ == RequestStatus::kFinished; }
  // Held out of scheduling while waiting (its prompt's KV is being loaded from a KV tier).
  bool held() const { return held_; }

  // --- Token eviction ---
  // Slots its block table holds: num_computed_tokens() until a compaction dropped some.
  int64_t num_kv_slots() const { return num_computed_tokens_ - num_dropped_slots_; }
  // RoPE position of slot s is s + position_offset(): the dropped slots for methods that keep
  // each token's position (H2O, SnapKV, PyramidKV); 0 for StreamingLLM, whose positions are
  // the cache's slots.
  int64_t position_offset() const {
    return input_.kv_policy.method == KvEvictionMethod::kStreaming ? 0 : num_dropped_slots_;
  }
  // Per layer, the first slot attention reads (PyramidKV's layers keeping fewer tokens than the
  // table's length); empty: 0 for every layer.
  const std::vector<int64_t>& kv_layer_key_begin() const { return kv_layer_key_begin_; }
  // Tokens evicted so far, averaged over layers and KV heads (OpenAI usage kv_tokens_evicted).
  int64_t num_evicted_tokens() const { return num_evicted_tokens_; }
  // The compression point: the end of the prompt, or a scoring request's prompt_logits_start.
  int64_t compress_at() const {
    return input_.is_scoring() ? input_.prompt_logits_start : num_prompt_tokens();
  }
  KvEvictionProgress eviction_progress() const {
    return {num_computed_tokens_, num_kv_slots(), compress_at()};
  }

  // Namespaced hashes of the first num_blocks full blocks of all_token_ids() (PrefixBlockKey,
  // kv/radix_cache.h): hashes[i] identifies the namespace and tokens [0, (i + 1) * block_size).
  // Each is computed once: tokens are only appended, so the chain only extends.
  const std::vector<uint64_t>& block_hashes(int64_t num_blocks, int64_t block_size);

  // --- State transitions (the Scheduler's) ---
  // Waiting or preempted -> running with the first num_cached_tokens served from the cache.
  void start_running(int64_t num_cached_tokens);
  // Running -> preempted: the KV is gone (recomputed later); the output is kept.
  void preempt();
  // A step computed num_new_tokens more tokens (running only).
  void advance_computed(int64_t num_new_tokens);
  // Prompt logits rows up to position `position` (exclusive) were returned.
  void advance_prompt_logits(int64_t position);
  void append_output_token(TokenId token);
  // The EOS or stop token that is finishing the request.
  void set_stop_token(TokenId token);
  // Waiting or preempted: held out of scheduling, or released.
  void set_held(bool held);
  // Any state -> finished (its blocks must already be freed).
  void finish(FinishReason reason);
  // Running: its table was compacted to num_kv_slots slots (layer_key_begin as
  // CompactionLayout), evicting num_evicted_tokens more tokens (mean over layers and heads).
  void compacted(int64_t num_kv_slots, std::vector<int64_t> layer_key_begin,
                 int64_t num_evicted_tokens);

 private:
  const SeqId id_;
  const RequestInput input_;
  const int64_t arrival_seq_;
  const std::chrono::steady_clock::time_point arrival_time_;
  const std::string cache_namespace_;
  std::vector<TokenId> output_ids_;
  std::vector<TokenId> all_token_ids_;
  int64_t num_computed_tokens_ = 0;
  int64_t num_cached_tokens_ = 0;
  int64_t num_cached_prompt_tokens_ = 0;
  RequestStatus status_ = RequestStatus::kWaiting;
  FinishReason finish_reason_ = FinishReason::kNone;
  TokenId stop_token_id_ = kNoToken;
  bool held_ = false;
  int64_t num_preemptions_ = 0;
  int64_t prompt_logits_next_ = 0;
  int64_t num_dropped_slots_ = 0;  // computed tokens minus slots held
  int64_t num_evicted_tokens_ = 0;
  std::vector<int64_t> kv_layer_key_begin_;
  // Memo of block_hashes(): the namespaced keys, and the namespace-free chain they extend.
  std::vector<uint64_t> block_hashes_;
  uint64_t block_chain_ = 0;
};

}  // namespace kvserve

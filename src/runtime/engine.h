// Engine: the step loop on its own thread (drain new and aborted requests -> schedule ->
// execute -> update -> publish outputs and stats), and EngineClient / RequestStream, the
// thread-safe way in (submit, abort) and out (one stream of outputs per request).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_stats.h"
#include "model/llama.h"
#include "runtime/engine_core.h"
#include "runtime/kv_cache_config.h"
#include "runtime/request.h"
#include "runtime/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {

using EngineClock = std::chrono::steady_clock;

// The engine core's options (scheduler config, prefix caching, invariant checks) plus what the
// engine's output processing needs.
struct EngineOptions : EngineCoreOptions {
  // For stop strings and the text of outputs (optional; not owned, must outlive the engine).
  const Tokenizer* tokenizer = nullptr;
  // Control tokens whose text the output keeps (tool-call and reasoning markup such as
  // <|python_tag|> or [TOOL_CALLS], which the tool-call parsers read); other control tokens
  // have no text.
  std::vector<TokenId> detokenize_special_ids;
  // Called on the engine thread after every step that ran (`serve --step-log`) with the step
  // and its seconds: from the start of the loop pass (taking in new requests and aborts) to
  // its outputs published, the cadence a simulated clock must reproduce. Must return quickly.
  std::function<void(const EngineCoreStep&, double seconds)> on_step;
};

// One piece of a request's output, as the engine published it after a step.
struct StreamEvent {
  std::vector<TokenId> token_ids;  // tokens sampled in this step (at most one today)
  std::vector<SampledLogprobs> logprobs;  // one per token id, when the request asked
  // With RequestInput::prompt_logits_start >= 0 (echo with logprobs, scoring): for each
  // prompt position p computed in this step, p >= max(1, prompt_logits_start), the logprob of
  // prompt token p given the tokens before it and the max(0, logprobs) most likely tokens
  // there. prompt_logprobs_first is the first such position.
  std::vector<SampledLogprobs> prompt_logprobs;
  int64_t prompt_logprobs_first = 0;
  std::string text;                // their text (with a tokenizer; stop strings trimmed)
  FinishReason finish_reason = FinishReason::kNone;  // kNone: more to come
  std::string error;                                 // with kError
  int64_t num_cached_prompt_tokens = 0;
  // Of those, by the tier that held them (indexed by KvTier: memory, disk, Redis).
  int64_t num_cached_prompt_tokens_by_tier[kNumKvTiers] = {};
  int64_t num_kv_tokens_evicted = 0;  // token eviction, on the finishing event
  EngineClock::time_point time;  // when the engine published it
  // When the request was first scheduled (left the waiting queue); set on every event after
  // that, unset (epoch) when it never ran (e.g. aborted while waiting).
  EngineClock::time_point first_scheduled_time;
  bool finished() const { return finish_reason != FinishReason::kNone; }
};

// Published after every step. Plain value type.
struct EngineStats {
  int64_t num_running = 0;
  int64_t max_num_running = 0;  // the most requests running at once after a step, so far
  int64_t num_waiting = 0;
  int64_t num_steps = 0;
  int64_t num_preemptions_total = 0;
  int64_t num_prefix_deferrals_total = 0;  // see SchedulerStats
  int64_t num_blocks = 0;
  int64_t blocks_in_use = 0;  // held by sequences
  int64_t blocks_cached = 0;  // held only by the prefix cache
  double kv_usage = 0.0;      // blocks_in_use / num_blocks
  int64_t prefix_queries_tokens = 0;
  int64_t prefix_hits_tokens = 0;
  int64_t num_prompt_tokens_total = 0;  // of requests admitted
  int64_t num_generated_tokens_total = 0;
  int64_t num_sequences_in_cache = 0;  // KvCacheManager sequences (0 when idle)
  KvCacheManagerStats kv;              // the cache manager's counters (miss reasons, evictions)
  KvMemoryStats memory;                // blocks, bytes and fragmentation right now
  int64_t clipped_values_total = 0;    // fp8 KV values that saturated, all layers
  // Structured output: tokens sampled under a grammar; seconds spent masking them.
  int64_t grammar_tokens_total = 0;
  double grammar_seconds_total = 0.0;
  // KV tiers (--kv-offload-dir, --kv-redis): the engine side's counters (prompt tokens served
  // per tier, blocks copied in and out, late loads). The stores' own counters change between
  // steps: read them from KvTierManager::stats().
  KvTierEngineStats kv_tier_engine;
};

namespace engine_internal {
// One request's output queue, shared by the engine thread (producer) and its RequestStream.
struct StreamState {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<StreamEvent> events;
  bool finished = false;  // the final event was pushed
  void push(StreamEvent ev);
};
struct Command {
  enum Kind { kAdd, kAbort, kResetPrefixCache } kind = kAdd;
  SeqId id = 0;
  RequestInput input;
  std::shared_ptr<StreamState> stream;
  std::shared_ptr<std::promise<bool>> reply;  // kResetPrefixCache
};
// The engine's input queue, shared with streams (so a stream may outlive the engine).
struct Inbox {
  std::mutex mu;
  std::condition_variable cv;       // engine waits for commands
  std::condition_variable idle_cv;  // wait_until_idle waits for the engine
  std::deque<Command> commands;
  bool stopping = false;
  bool idle = true;  // engine has no requests and saw no new command
  void push(Command c);
};
}  // namespace engine_internal

class Engine;

// The output stream of one request. Next() blocks until the engine publishes. Destroying a
// stream whose request has not finished aborts the request. Use from one thread at a time.
class RequestStream {
 public:
  RequestStream(SeqId id, std::shared_ptr<engine_internal::StreamState> state,
                std::shared_ptr<engine_internal::Inbox> inbox, EngineClock::time_point submitted);
  ~RequestStream();
  RequestStream(const RequestStream&) = delete;
  RequestStream& operator=(const RequestStream&) = delete;

  SeqId id() const { return id_; }
  EngineClock::time_point submit_time() const { return submitted_; }
  // Next event; false once the final event has been returned.
  bool Next(StreamEvent* event);
  enum class WaitResult { kEvent, kTimeout, kDone };
  // Like Next() but waits at most `timeout` (kTimeout: nothing yet; kDone: the final event was
  // returned before).
  WaitResult NextFor(StreamEvent* event, std::chrono::milliseconds timeout);
  // True after the final event was returned by Next().
  bool finished() const { return done_; }

 private:
  SeqId id_;
  std::shared_ptr<engine_internal::StreamState> state_;
  std::shared_ptr<engine_internal::Inbox> inbox_;
  EngineClock::time_point submitted_;
  bool done_ = false;
};

// Owns an EngineCore (scheduler, KV cache manager, model runner), touched by the engine thread
// only, plus the per-request output state (detokenizer, stop strings). The model, the
// PagedKvCache, the pool and the tokenizer are borrowed and must outlive it.
// submit(), abort(), stats() and wait_until_idle() are thread-safe.
// Invariant: once idle, the KvCacheManager holds no sequence (every block free or cached).
class Engine {
 public:
  static StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options, LlamaModel* model,
                                                  PagedKvCache* kv, ThreadPool* pool);
  ~Engine();  // aborts what is left and joins the thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // InvalidArgument for what the engine core would refuse (EngineCore::ValidateInput: empty
  // prompt, max_tokens < 1, bad sampling parameters, a token out of the vocabulary, prompt >=
  // max_model_len) and for prompt logits, which streams do not carry.
  StatusOr<std::unique_ptr<RequestStream>> submit(RequestInput input);
  // What submit() would refuse, without submitting.
  Status validate(const RequestInput& input) const;
  void abort(SeqId id);
  // Empties the prefix cache (EngineCore::reset_prefix_cache) between two steps; false while
  // a running request holds cached blocks, or when the engine has stopped.
  bool reset_prefix_cache();
  EngineStats stats() const;
  // Blocks until every submitted request has finished; returns the stats then.
  EngineStats wait_until_idle();
  const SchedulerConfig& scheduler_config() const { return core_->scheduler_config(); }

 private:
  struct Live {  // engine-thread state of one request
    std::shared_ptr<engine_internal::StreamState> stream;
    std::unique_ptr<IncrementalDetokenizer> detok;
    std::string text;      // text so far (only held when there are stop strings)
    size_t text_sent = 0;  // bytes of `text` already published
    size_t max_stop_len = 0;
    std::vector<std::string> stops;
    std::vector<TokenId> prompt_ids;  // kept only for prompt logprobs
    int32_t num_top_logprobs = 0;
    EngineClock::time_point first_scheduled_time{};  // epoch until first scheduled
  };
  Engine(const EngineOptions& options, PagedKvCache* kv, std::unique_ptr<EngineCore> core);
  void loop();
  void handle(engine_internal::Command& c);
  void step(EngineClock::time_point pass_start);
  // An engine that stopped with requests left ends them with kAbort.
  void abort_all(const std::string& why);
  // Publishes a scheduler RequestOutput (text, stop strings); may finish the request.
  void publish(const RequestOutput& out);
  void finish_stream(SeqId id, FinishReason reason, const std::string& error);
  void publish_stats();

  EngineOptions options_;
  std::vector<uint8_t> render_special_;  // per token id: options_.detokenize_special_ids
  PagedKvCache* kv_cache_;
  std::unique_ptr<EngineCore> core_;
  std::unordered_map<SeqId, Live> live_;
  int64_t num_prompt_tokens_total_ = 0;
  int64_t num_generated_tokens_total_ = 0;
  int64_t max_num_running_ = 0;  // EngineStats::max_num_running

  std::shared_ptr<engine_internal::Inbox> inbox_;
  std::atomic<SeqId> next_id_{1};
  mutable std::mutex stats_mu_;
  EngineStats stats_;
  std::thread thread_;
};

// Thin thread-safe handle to an Engine (not owned) for the HTTP side and the CLI.
class EngineClient {
 public:
  explicit EngineClient(Engine* engine) : engine_(engine) {}
  StatusOr<std::unique_ptr<RequestStream>> submit(RequestInput input) {
    return engine_->submit(std::move(input));
  }
  void abort(SeqId id) { engine_->abort(id); }
  EngineStats stats() const { return engine_->stats(); }

 private:
  Engine* engine_;
};

}  // namespace kvserve

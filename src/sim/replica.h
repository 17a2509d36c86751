// ReplicaSim: one simulated engine (the real Scheduler over a KvCacheManager, a stand-in for
// the model) with its own clock; the unit `kvserve sim` replays a trace on (SimulateCapacity:
// one replica; SimulateFleet: several behind a router). See sim.h for the serving model.
// Internal to src/sim.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "kv/kv_cache_manager.h"
#include "runtime/scheduler.h"
#include "sim/sim.h"

namespace kvserve::sim {

// Owns its cache manager and scheduler; borrows the trace and the options (must outlive it).
// Request ids are trace indices. Not thread-safe.
class ReplicaSim {
 public:
  // InvalidArgument when the scheduler flags do not resolve for this capacity.
  static StatusOr<std::unique_ptr<ReplicaSim>> Create(const std::vector<TraceRequest>& trace,
                                                      const SimOptions& options,
                                                      int64_t capacity_blocks,
                                                      bool record_events = false);

  // Prompts as token ids, one per trace request, instead of the trace's hash ids (bench
  // serve's workloads: sim/serving.h). Borrowed; set before the first Add.
  void set_prompts(const std::vector<std::vector<TokenId>>* prompts) { prompts_ = prompts; }
  // Remember, per request, the end of every step that sampled a token for it, the tokens its
  // first admission found cached, when it finished, and the blocks in use after every step
  // (what a bench serve result reports). Set before the first Add.
  void RecordTimeline();

  // Queues trace request i (it arrived at or before now_s()); false: rejected (prompt >=
  // max_model_len).
  bool Add(size_t i);
  bool busy() const { return sched_->has_unfinished(); }
  // Requests running or waiting (what a least-loaded router compares).
  int64_t load() const { return sched_->num_running() + sched_->num_waiting(); }
  double now_s() const { return now_s_; }
  // An idle replica's clock jumps to an arrival.
  void AdvanceTo(double t_s) { now_s_ = std::max(now_s_, t_s); }
  // One engine step at now_s(): schedule, "run", update; the clock advances by its duration.
  Status Step();
  // The row of this replay, with hits and misses of first admissions only (see sim.h).
  // KV_CHECKs that every request finished and every block came back.
  SimRow Finish();
  // Queueing delays and times to first token of the requests it finished (seconds).
  const std::vector<double>& queue_s() const { return queue_s_; }
  const std::vector<double>& ttft_s() const { return ttft_s_; }
  // The requests the last Step finished.
  const std::vector<SeqId>& finished_in_last_step() const { return finished_; }
  // With RecordTimeline: per trace request (empty / -1 for requests never added or rejected).
  const std::vector<std::vector<double>>& token_times_s() const { return token_times_s_; }
  const std::vector<int64_t>& first_cached_tokens() const { return first_cached_tokens_; }
  const std::vector<double>& finish_s() const { return finish_s_; }
  // (end of step, blocks in use) after every step.
  const std::vector<std::pair<double, int64_t>>& blocks_in_use() const { return blocks_in_use_; }
  KvCacheManager& kv() { return *kv_; }
  const SchedulerConfig& config() const { return sched_->config(); }

 private:
  ReplicaSim(const std::vector<TraceRequest>& trace, const SimOptions& options);

  const std::vector<TraceRequest>& trace_;
  const SimOptions& o_;
  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<Scheduler> sched_;
  SimRow row_;
  // The step's duration: the cost model's (options.deployment), else the two rates.
  double StepSeconds(const SchedulerOutput& out, int64_t prefill_tokens);
  // options.kv_policy: compacts the step's sequences whose compaction point came.
  void CompactDueSequences(const SchedulerOutput& out);

  const std::vector<std::vector<TokenId>>* prompts_ = nullptr;
  bool record_timeline_ = false;
  std::vector<std::vector<double>> token_times_s_;
  std::vector<int64_t> first_cached_tokens_;
  std::vector<double> finish_s_;
  std::vector<std::pair<double, int64_t>> blocks_in_use_;
  std::vector<SeqId> finished_;
  std::vector<cost::StepSeq> step_seqs_;  // reused
  // Per trace request: whether this replica holds a sequence for it now, ever admitted it,
  // and sampled its first token.
  std::vector<uint8_t> running_, admitted_, sampled_;
  std::vector<double> queue_s_, ttft_s_;
  KvCacheManagerStats readmit_;  // lookups of re-admissions, subtracted at the end
  ModelOutput model_;            // reused: clear() keeps the buckets
  int64_t num_added_ = 0;
  double now_s_ = 0.0;
  int empty_steps_ = 0;
};

// Seconds since the epoch of the trace at which request i arrives.
inline double ArrivalSeconds(const TraceRequest& r) {
  return static_cast<double>(r.timestamp_ms) / 1000.0;
}

// row's queueing and TTFT figures (mean, max, p99) from the per-request values.
void SummarizeLatencies(const std::vector<double>& queue_s, const std::vector<double>& ttft_s,
                        SimRow* row);

// Request indices in arrival order (stable for equal timestamps).
std::vector<size_t> ArrivalOrder(const std::vector<TraceRequest>& trace);

}  // namespace kvserve::sim

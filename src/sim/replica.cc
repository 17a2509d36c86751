#include "sim/replica.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "base/check.h"
#include "base/percentile.h"
#include "base/str_format.h"

namespace kvserve::sim {
namespace {

// The token a request "samples": -2 - index, never a prompt token (those are >= 0) nor
// kNoToken.
TokenId OutputToken(SeqId id) { return static_cast<TokenId>(-2 - id); }

double Mean(const std::vector<double>& v) {
  double sum = 0.0;
  for (double x : v) sum += x;
  return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
}

}  // namespace

void SummarizeLatencies(const std::vector<double>& queue_s, const std::vector<double>& ttft_s,
                        SimRow* row) {
  row->mean_queue_s = Mean(queue_s);
  row->max_queue_s = queue_s.empty() ? 0.0 : *std::max_element(queue_s.begin(), queue_s.end());
  row->p99_queue_s = Percentile(queue_s, 99.0);
  row->mean_ttft_s = Mean(ttft_s);
  row->p99_ttft_s = Percentile(ttft_s, 99.0);
}

std::vector<size_t> ArrivalOrder(const std::vector<TraceRequest>& trace) {
  std::vector<size_t> order(trace.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return trace[a].timestamp_ms < trace[b].timestamp_ms;
  });
  return order;
}

ReplicaSim::ReplicaSim(const std::vector<TraceRequest>& trace, const SimOptions& options)
    : trace_(trace),
      o_(options),
      running_(trace.size(), 0),
      admitted_(trace.size(), 0),
      sampled_(trace.size(), 0) {}

StatusOr<std::unique_ptr<ReplicaSim>> ReplicaSim::Create(const std::vector<TraceRequest>& trace,
                                                         const SimOptions& o,
                                                         int64_t capacity_blocks,
                                                         bool record_events) {
  std::unique_ptr<ReplicaSim> r(new ReplicaSim(trace, o));
  const int64_t bs = o.block_tokens;
  const int64_t capacity_tokens = capacity_blocks * bs;
  // Remember every eviction (twice the blocks the trace's sequences can commit: recompute
  // after preemption commits, and may evict, a block again), so that "evicted" and "never
  // seen" misses are told apart exactly.
  int64_t num_seq_blocks = 0;
  int64_t longest_tokens = 2;
  for (const TraceRequest& t : trace) {
    const int64_t total = t.input_tokens + std::max<int64_t>(1, t.output_tokens);
    num_seq_blocks += total / bs;
    longest_tokens = std::max(longest_tokens, total);
  }
  r->kv_ = std::make_unique<KvCacheManager>(
      KvCacheManagerOptions{.num_blocks = capacity_blocks,
                            .block_size = bs,
                            .enable_prefix_caching = o.scheduler.enable_prefix_caching,
                            .eviction_history_size = std::max<int64_t>(1, 2 * num_seq_blocks),
                            .record_events = record_events});
  const std::string where =
      StrFormat("capacity %lld blocks", static_cast<long long>(capacity_blocks));
  StatusOr<SchedulerConfig> resolved = ResolveSchedulerConfig(
      o.scheduler, std::max<int64_t>(2, std::min(o.max_model_len > 0 ? o.max_model_len
                                                                      : longest_tokens,
                                                 capacity_tokens)));
  if (!resolved.ok()) return resolved.status().WithContext(where);
  SchedulerConfig config = *std::move(resolved);
  config.model_namespace = "sim";
  StatusOr<std::unique_ptr<Scheduler>> created = Scheduler::Create(config, r->kv_.get());
  if (!created.ok()) return created.status().WithContext(where);
  r->sched_ = std::move(created).value();
  r->row_.capacity_blocks = capacity_blocks;
  r->row_.max_model_len = config.max_model_len;
  r->row_.max_num_batched_tokens = config.max_num_batched_tokens;
  r->queue_s_.reserve(trace.size());
  r->ttft_s_.reserve(trace.size());
  return r;
}

void ReplicaSim::RecordTimeline() {
  record_timeline_ = true;
  token_times_s_.assign(trace_.size(), {});
  first_cached_tokens_.assign(trace_.size(), -1);
  finish_s_.assign(trace_.size(), -1.0);
}

double ReplicaSim::StepSeconds(const SchedulerOutput& out, int64_t prefill_tokens) {
  if (!o_.deployment) {
    return 1.0 / o_.decode_tokens_per_s +
           static_cast<double>(prefill_tokens) / o_.prefill_tokens_per_s;
  }
  step_seqs_.clear();
  for (const ScheduledSeq& s : out.seqs) {
    // Attention reads the KV the sequence holds: its computed tokens, fewer once token
    // eviction compacted it (SnapKV after the prompt, StreamingLLM as it goes).
    const Request* r = sched_->request(s.id);
    const int64_t held = r != nullptr ? r->num_kv_slots() : s.num_computed_tokens;
    step_seqs_.push_back({.num_computed_tokens = held,
                          .num_new_tokens = s.num_new_tokens,
                          .samples = s.samples});
  }
  const cost::StepCost c = cost::ComputeStepCost(*o_.deployment, step_seqs_);
  cost::StepCost& t = row_.step_time_total;
  t.matmul.Add(c.matmul);
  t.output.Add(c.output);
  t.attention.Add(c.attention);
  t.comm_s += c.comm_s;
  t.overhead_s += c.overhead_s;
  t.seconds += c.seconds;
  t.num_tokens += c.num_tokens;
  t.num_sampled += c.num_sampled;
  return c.seconds;
}

bool ReplicaSim::Add(size_t i) {
  const TraceRequest& r = trace_[i];
  ++num_added_;
  RequestInput input;
  if (prompts_ != nullptr) {
    input.prompt_ids = (*prompts_)[i];
  } else {
    TracePromptTokens(r, o_.hash_block_tokens, &input.prompt_ids);
  }
  input.max_tokens = std::max<int64_t>(1, r.output_tokens);
  input.ignore_eos = true;
  input.kv_policy = o_.kv_policy;
  if (o_.tenants > 1) input.cache_salt = std::to_string(i % static_cast<size_t>(o_.tenants));
  const bool clipped = r.input_tokens + input.max_tokens > sched_->config().max_model_len;
  if (!sched_->add_request(static_cast<SeqId>(i), std::move(input)).ok()) {
    KV_CHECK_GE(r.input_tokens, sched_->config().max_model_len) << "request " << i;
    ++row_.num_rejected;
    return false;
  }
  row_.num_clipped += clipped;
  return true;
}

Status ReplicaSim::Step() {
  const int64_t bs = o_.block_tokens;
  const double step_start_s = now_s_;
  const SchedulerOutput out = sched_->schedule();
  finished_.clear();
  for (SeqId id : out.preempted_ids) running_[static_cast<size_t>(id)] = 0;
  if (out.seqs.empty()) {
    // Only after a step that preempted every running request; the next one admits.
    if (++empty_steps_ > 2) {
      return InternalError(StrFormat("sim: the scheduler made no progress at %.3f s", now_s_));
    }
    return OkStatus();
  }
  empty_steps_ = 0;
  model_.sampled.clear();
  int64_t prefill_tokens = 0;
  for (const ScheduledSeq& s : out.seqs) {
    const size_t i = static_cast<size_t>(s.id);
    const bool decode = s.num_new_tokens == 1 && s.num_computed_tokens >= trace_[i].input_tokens;
    if (decode) {
      ++row_.num_decode_tokens;
    } else {
      prefill_tokens += s.num_new_tokens;
    }
    if (s.samples) model_.sampled.emplace(s.id, OutputToken(s.id));
    if (running_[i]) continue;
    // Admitted in this step.
    running_[i] = 1;
    if (!admitted_[i]) {
      admitted_[i] = 1;
      queue_s_.push_back(step_start_s - ArrivalSeconds(trace_[i]));
      if (record_timeline_) first_cached_tokens_[i] = s.num_computed_tokens;
      continue;
    }
    // A re-admission after preemption: its lookup (the tokens it had, prompt and output;
    // nothing was committed since start_sequence, so matching again finds the same) is
    // counted apart.
    const Request* r = sched_->request(s.id);
    const PrefixMatch m = kv_->match(r->cache_namespace(), r->all_token_ids());
    KV_CHECK_EQ(m.num_cached_tokens, s.num_computed_tokens) << "request " << s.id;
    ++readmit_.prefix_queries;
    readmit_.prefix_hits += !m.blocks.empty();
    readmit_.prefix_queries_tokens += m.num_prompt_tokens;
    readmit_.prefix_hits_tokens += m.num_cached_tokens;
    readmit_.prefix_queries_blocks += m.num_prompt_tokens / bs;
    readmit_.prefix_hits_blocks += static_cast<int64_t>(m.blocks.size());
    for (int k = 0; k < kNumPrefixMissReasons; ++k) readmit_.miss_tokens[k] += m.miss_tokens[k];
  }
  row_.num_prefill_tokens += prefill_tokens;
  row_.peak_blocks_in_use = std::max(row_.peak_blocks_in_use, kv_->stats().blocks_in_use);
  now_s_ += StepSeconds(out, prefill_tokens);
  for (const ScheduledSeq& s : out.seqs) {
    const size_t i = static_cast<size_t>(s.id);
    if (record_timeline_ && s.samples) token_times_s_[i].push_back(now_s_);
    if (s.samples && !sampled_[i]) {
      sampled_[i] = 1;
      ttft_s_.push_back(now_s_ - ArrivalSeconds(trace_[i]));
    }
  }
  for (const RequestOutput& result : sched_->update(out, model_)) {
    if (!result.finished()) continue;
    running_[static_cast<size_t>(result.id)] = 0;
    ++row_.num_requests;
    row_.end_s = now_s_;
    finished_.push_back(result.id);
    if (record_timeline_) finish_s_[static_cast<size_t>(result.id)] = now_s_;
  }
  if (o_.kv_policy.method != KvEvictionMethod::kNone) CompactDueSequences(out);
  if (record_timeline_) blocks_in_use_.emplace_back(now_s_, kv_->stats().blocks_in_use);
  if (o_.check_invariants) sched_->check_invariants();
  return OkStatus();
}

void ReplicaSim::CompactDueSequences(const SchedulerOutput& out) {
  const KvEvictionPolicy& policy = o_.kv_policy;
  const int64_t num_layers = o_.deployment ? o_.deployment->kv.num_layers : 1;
  for (const ScheduledSeq& s : out.seqs) {
    const Request* r = sched_->request(s.id);
    if (r == nullptr || r->status() != RequestStatus::kRunning) continue;
    if (!CompactionDue(policy, r->eviction_progress(), o_.block_tokens)) continue;
    // Every layer and head keeps min(budget, slots) (SelectKeptTokens' count); no KV to move.
    const int64_t slots = r->num_kv_slots();
    const int64_t kept = std::min(policy.budget_tokens, slots);
    if (!kv_->can_compact(s.id, kept)) {  // as EngineCore: the pool is short, recompute later
      sched_->preempt_running(s.id);
      continue;
    }
    kv_->compact(s.id, kept, [](const BlockTable&) {}, [](const BlockTable&) {});
    sched_->record_compaction(s.id, kept, std::vector<int64_t>(static_cast<size_t>(num_layers), 0),
                              slots - kept);
    ++row_.num_compactions;
  }
}

SimRow ReplicaSim::Finish() {
  KV_CHECK(kv_->num_sequences() == 0);
  SimRow row = row_;
  const SchedulerStats ss = sched_->stats();
  row.num_preemptions = ss.num_preemptions_total;
  row.num_steps = ss.num_steps;
  row.stats = kv_->stats();
  KV_CHECK_EQ(row.stats.blocks_in_use, 0) << "blocks leaked";
  KV_CHECK_EQ(row.num_requests + row.num_rejected, num_added_);
  KvCacheManagerStats& st = row.stats;
  st.prefix_queries -= readmit_.prefix_queries;
  st.prefix_hits -= readmit_.prefix_hits;
  st.prefix_queries_tokens -= readmit_.prefix_queries_tokens;
  st.prefix_hits_tokens -= readmit_.prefix_hits_tokens;
  st.prefix_queries_blocks -= readmit_.prefix_queries_blocks;
  st.prefix_hits_blocks -= readmit_.prefix_hits_blocks;
  for (int k = 0; k < kNumPrefixMissReasons; ++k) st.miss_tokens[k] -= readmit_.miss_tokens[k];
  KV_CHECK_EQ(st.prefix_queries, row.num_requests);
  row.readmit_queries_tokens = readmit_.prefix_queries_tokens;
  row.readmit_hits_tokens = readmit_.prefix_hits_tokens;
  SummarizeLatencies(queue_s_, ttft_s_, &row);
  return row;
}

}  // namespace kvserve::sim

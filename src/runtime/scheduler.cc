#include "runtime/scheduler.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_set>
#include <utility>

#include "base/check.h"

namespace kvserve {

// Requests with different salts must never share blocks: the salt is part of the namespace.
// The separator (ASCII unit separator) does not occur in model names.
std::string CacheNamespace(const std::string& model_namespace, const std::string& salt) {
  if (salt.empty()) return model_namespace;
  return model_namespace + "\x1f" + salt;
}

namespace {

std::string Num(int64_t v) { return std::to_string(v); }

bool Contains(const std::vector<TokenId>& ids, TokenId token) {
  return std::find(ids.begin(), ids.end(), token) != ids.end();
}

}  // namespace

Status SchedulerConfig::Validate() const {
  if (max_num_batched_tokens < 1) {
    return InvalidArgumentError("max_num_batched_tokens must be >= 1, got " +
                                Num(max_num_batched_tokens));
  }
  if (max_num_seqs < 1) {
    return InvalidArgumentError("max_num_seqs must be >= 1, got " + Num(max_num_seqs));
  }
  if (max_model_len < 2) {
    return InvalidArgumentError(
        "max_model_len must be >= 2 (one prompt and one output token), got " +
        Num(max_model_len));
  }
  if (long_prefill_token_threshold < 0) {
    return InvalidArgumentError("long_prefill_token_threshold must be >= 0, got " +
                                Num(long_prefill_token_threshold));
  }
  if (max_num_batched_tokens < max_num_seqs) {
    return InvalidArgumentError("max_num_batched_tokens (" + Num(max_num_batched_tokens) +
                                ") must be >= max_num_seqs (" + Num(max_num_seqs) + ")");
  }
  if (!enable_chunked_prefill && max_num_batched_tokens < max_model_len) {
    return InvalidArgumentError(
        "max_num_batched_tokens (" + Num(max_num_batched_tokens) + ") is smaller than "
        "max_model_len (" + Num(max_model_len) + ") with chunked prefill disabled: a prompt "
        "longer than the step budget could never run. Increase --max-num-batched-tokens, "
        "decrease --max-model-len or enable chunked prefill");
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(const SchedulerConfig& config,
                                                       KvCacheManager* kv) {
  KV_CHECK(kv != nullptr);
  KV_RETURN_IF_ERROR(config.Validate());
  const int64_t capacity_tokens = kv->num_blocks() * kv->block_size();
  if (capacity_tokens < config.max_model_len) {
    return InvalidArgumentError(
        "the KV cache holds " + Num(capacity_tokens) + " tokens (" + Num(kv->num_blocks()) +
        " blocks of " + Num(kv->block_size()) + "), fewer than one max_model_len (" +
        Num(config.max_model_len) + ") sequence. Give the KV cache more memory or decrease "
        "--max-model-len");
  }
  return std::unique_ptr<Scheduler>(new Scheduler(config, kv));
}

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager* kv)
    : config_(config), kv_(kv) {}

Status Scheduler::ValidateInput(const RequestInput& input) const {
  const int64_t prompt_len = static_cast<int64_t>(input.prompt_ids.size());
  if (prompt_len == 0) return InvalidArgumentError("the prompt is empty");
  if (Status s = input.kv_policy.Validate(); !s.ok()) {
    return InvalidArgumentError("kv_policy: " + s.message());
  }
  // StreamingLLM assigns positions within its window, so a sequence may outgrow the model's
  // context as long as the window fits it.
  const bool streaming = input.kv_policy.method == KvEvictionMethod::kStreaming;
  if (streaming) {
    const int64_t window = ContinuousCompactionSlots(input.kv_policy, kv_->block_size());
    if (window > config_.max_model_len) {
      return InvalidArgumentError(
          "kv_policy: budget_tokens (" + Num(input.kv_policy.budget_tokens) + ") plus one block (" +
          Num(kv_->block_size()) + ") must fit the maximum context length (--max-model-len " +
          Num(config_.max_model_len) + ")");
    }
  }
  if (input.max_tokens < 0 || (input.max_tokens == 0 && input.prompt_logits_start < 0)) {
    return InvalidArgumentError("max_tokens must be >= 1, got " + Num(input.max_tokens));
  }
  if (streaming) {
    // no length limit: the cache holds at most the window
  } else if (input.is_scoring()) {
    if (prompt_len > config_.max_model_len) {
      return InvalidArgumentError(
          "the prompt (" + Num(prompt_len) + " tokens) is longer than the model's maximum "
          "context length (--max-model-len " + Num(config_.max_model_len) + ")");
    }
  } else if (prompt_len >= config_.max_model_len) {
    return InvalidArgumentError(
        "the prompt (" + Num(prompt_len) + " tokens) plus at least one output token is longer "
        "than the model's maximum context length (--max-model-len " +
        Num(config_.max_model_len) + "). Shorten the prompt");
  }
  if (input.prompt_logits_start < -1 || input.prompt_logits_start >= prompt_len) {
    return InvalidArgumentError("prompt_logits_start must be -1 or a prompt position (0 .. " +
                                Num(prompt_len - 1) + "), got " + Num(input.prompt_logits_start));
  }
  KV_RETURN_IF_ERROR(input.sampling.Validate());
  if (input.logprobs < -1 || input.logprobs > kMaxLogprobs) {
    return InvalidArgumentError("logprobs must be between 0 and " + Num(kMaxLogprobs) + ", got " +
                                Num(input.logprobs));
  }
  return OkStatus();
}

Status Scheduler::add_request(SeqId id, RequestInput input) {
  if (requests_.count(id) != 0) {
    return InvalidArgumentError("request id " + Num(id) + " is already in use");
  }
  KV_RETURN_IF_ERROR(ValidateInput(input));
  std::string ns = CacheNamespace(config_.model_namespace, input.cache_salt);
  auto r = std::make_unique<Request>(id, std::move(input), next_arrival_seq_++, std::move(ns));
  insert_waiting(r.get());
  requests_.emplace(id, std::move(r));
  return OkStatus();
}

bool Scheduler::runs_before(const Request& a, const Request& b) const {
  if (config_.policy == SchedulingPolicy::kPriority && a.input().priority != b.input().priority) {
    return a.input().priority < b.input().priority;
  }
  return a.arrival_seq() < b.arrival_seq();
}

void Scheduler::insert_waiting(Request* r) {
  // After every request that runs before r (preempted requests go back ahead of younger ones).
  auto it = std::upper_bound(waiting_.begin(), waiting_.end(), r,
                             [this](const Request* a, const Request* b) {
                               return runs_before(*a, *b);
                             });
  waiting_.insert(it, r);
}

Request* Scheduler::choose_victim() const {
  KV_CHECK(!running_.empty());
  Request* victim = running_.front();
  for (Request* r : running_) {
    if (runs_before(*victim, *r)) victim = r;
  }
  return victim;
}

int64_t Scheduler::max_cached_tokens(const Request& r) const {
  const int64_t logits = r.input().prompt_logits_start >= 0 ? r.input().prompt_logits_start
                                                            : INT64_MAX;
  return std::min(logits, MaxCachedTokensWithEviction(r.input().kv_policy, r.compress_at(),
                                                      kv_->block_size()));
}

int64_t Scheduler::num_new_tokens(const Request& r, int64_t num_computed_tokens,
                                  int64_t budget_tokens) const {
  int64_t n = r.num_tokens() - num_computed_tokens;
  KV_CHECK_GE(n, 1) << "request " << r.id() << " has nothing to compute";
  if (r.input().kv_policy.method != KvEvictionMethod::kNone) {
    // Never past the next compaction point (a waiting request starts from its prefix match).
    KvEvictionProgress p = r.eviction_progress();
    if (r.status() != RequestStatus::kRunning) p = {num_computed_tokens, num_computed_tokens,
                                                    r.compress_at()};
    const int64_t until = TokensUntilCompaction(r.input().kv_policy, p, kv_->block_size());
    KV_CHECK_GE(until, 1) << "request " << r.id() << " is due for compaction";
    n = std::min(n, until);
  }
  if (config_.enable_chunked_prefill) {
    if (config_.long_prefill_token_threshold > 0) {
      n = std::min(n, config_.long_prefill_token_threshold);
    }
    return std::min(n, budget_tokens);
  }
  return n <= budget_tokens ? n : 0;  // all or nothing
}

void Scheduler::preempt(Request* victim, SchedulerOutput* out, int64_t* budget_tokens) {
  KV_CHECK(victim->status() == RequestStatus::kRunning);
  kv_->free(victim->id());
  running_.erase(std::find(running_.begin(), running_.end(), victim));
  auto scheduled = std::find_if(out->seqs.begin(), out->seqs.end(),
                                [victim](const ScheduledSeq& s) { return s.id == victim->id(); });
  if (scheduled != out->seqs.end()) {
    *budget_tokens += scheduled->num_new_tokens;
    out->num_scheduled_tokens -= scheduled->num_new_tokens;
    out->seqs.erase(scheduled);
  }
  victim->preempt();
  ++num_preemptions_total_;
  out->preempted_ids.push_back(victim->id());
  insert_waiting(victim);
}

SchedulerOutput Scheduler::schedule() {
  KV_CHECK(!step_in_flight_) << "schedule() called again before update() of step " << step_id_;
  SchedulerOutput out;
  out.step_id = ++step_id_;
  out.finished_ids = std::move(finished_since_schedule_);
  finished_since_schedule_.clear();
  out.preempted_ids = std::move(preempted_since_schedule_);
  preempted_since_schedule_.clear();
  int64_t budget_tokens = config_.max_num_batched_tokens;

  // 1. Running requests: decodes first, then prefill chunks, each in admission order.
  std::vector<Request*> order;
  order.reserve(running_.size());
  for (Request* r : running_) {
    if (r->num_tokens() - r->num_computed_tokens() == 1) order.push_back(r);
  }
  for (Request* r : running_) {
    if (r->num_tokens() - r->num_computed_tokens() != 1) order.push_back(r);
  }
  bool preempted_any = false;
  for (Request* r : order) {
    if (budget_tokens == 0) break;
    if (r->status() != RequestStatus::kRunning) continue;  // preempted earlier in this step
    const int64_t start = r->num_computed_tokens();
    const int64_t n = num_new_tokens(*r, start, budget_tokens);
    if (n == 0) continue;
    bool allocated = false;
    while (true) {
      if (kv_->allocate_slots(r->id(), r->num_kv_slots() + n)) {
        allocated = true;
        break;
      }
      Request* victim = choose_victim();
      preempt(victim, &out, &budget_tokens);
      preempted_any = true;
      if (victim == r) break;
    }
    if (!allocated) continue;
    out.seqs.push_back({r->id(), start, n, samples(*r, start + n)});
    out.num_scheduled_tokens += n;
    budget_tokens -= n;
  }

  // 2. Waiting requests, unless memory was short this step.
  // In-flight prefixes: the full prompt blocks that running requests are still computing (not
  // yet in the prefix cache). A waiting request whose next uncached block is one of them is
  // skipped for this step, so that it reuses that KV once committed instead of computing the
  // same blocks again beside it (e.g. many requests with one new system prompt arriving
  // together). It cannot starve: the running request makes progress every step, and once it
  // is preempted or past that block the deferral ends.
  const int64_t block_size = kv_->block_size();
  std::unordered_set<uint64_t> pending;
  const bool defer = kv_->prefix_caching_enabled();
  auto add_pending = [&](Request* r, int64_t num_computed) {
    if (num_computed >= r->num_prompt_tokens()) return;  // prefill done: blocks committed
    const int64_t full = r->num_prompt_tokens() / block_size;
    const std::vector<uint64_t>& hashes = r->block_hashes(full, block_size);
    for (int64_t b = num_computed / block_size; b < full; ++b) {
      pending.insert(hashes[static_cast<size_t>(b)]);
    }
  };
  if (defer) {
    for (Request* r : running_) add_pending(r, r->num_computed_tokens());
  }
  size_t next = 0;  // index in waiting_ of the next candidate
  while (!preempted_any && next < waiting_.size() && budget_tokens > 0 &&
         num_running() < config_.max_num_seqs) {
    Request* r = waiting_[next];
    if (r->held()) {
      ++next;
      continue;
    }
    const PrefixMatch match =
        kv_->match(r->cache_namespace(), r->all_token_ids(), max_cached_tokens(*r));
    KV_CHECK(match.num_cached_tokens >= 0 && match.num_cached_tokens < r->num_tokens())
        << "prefix match of " << match.num_cached_tokens << " tokens for " << r->num_tokens();
    const int64_t start = match.num_cached_tokens;
    if (defer && !pending.empty()) {
      const int64_t first_uncached = start / block_size;
      // Only a block the request could reuse: full, and not holding its last token.
      if ((first_uncached + 1) * block_size < r->num_tokens()) {
        const std::vector<uint64_t>& hashes = r->block_hashes(first_uncached + 1, block_size);
        if (pending.count(hashes[static_cast<size_t>(first_uncached)]) != 0) {
          ++num_prefix_deferrals_total_;
          ++next;
          continue;
        }
      }
    }
    const int64_t n = num_new_tokens(*r, start, budget_tokens);
    // Wait for a later step if the prompt does not fit the budget left (no chunked prefill)
    // or the blocks do not suffice; nobody behind it overtakes.
    if (n == 0 || !kv_->can_start(match, start + n)) break;
    kv_->start_sequence(r->id(), r->cache_namespace(), match);
    KV_CHECK(kv_->allocate_slots(r->id(), start + n))
        << "can_start promised room for request " << r->id();
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(next));
    r->start_running(start);
    running_.push_back(r);
    out.seqs.push_back({r->id(), start, n, samples(*r, start + n)});
    out.num_scheduled_tokens += n;
    budget_tokens -= n;
    if (defer) add_pending(r, start);
  }

  KV_CHECK_LE(out.num_scheduled_tokens, config_.max_num_batched_tokens);
  KV_CHECK_EQ(out.num_scheduled_tokens + budget_tokens, config_.max_num_batched_tokens);
  KV_CHECK_LE(static_cast<int64_t>(out.seqs.size()), config_.max_num_seqs);
  step_in_flight_ = !out.seqs.empty();
  if (step_in_flight_) {
    ++num_steps_;
    num_scheduled_tokens_total_ += out.num_scheduled_tokens;
  }
  return out;
}

FinishReason Scheduler::check_stop(Request* r, TokenId token) const {
  if (!r->input().ignore_eos && Contains(config_.eos_token_ids, token)) {
    r->set_stop_token(token);
    return FinishReason::kStop;
  }
  if (Contains(r->input().stop_token_ids, token)) {
    r->set_stop_token(token);
    return FinishReason::kStop;
  }
  const bool streaming = r->input().kv_policy.method == KvEvictionMethod::kStreaming;
  if (r->num_output_tokens() >= r->input().max_tokens ||
      (!streaming && r->num_tokens() >= config_.max_model_len)) {
    return FinishReason::kLength;
  }
  return FinishReason::kNone;
}

std::vector<RequestOutput> Scheduler::update(const SchedulerOutput& output,
                                             const ModelOutput& model) {
  if (output.seqs.empty()) return {};
  KV_CHECK(step_in_flight_ && output.step_id == step_id_)
      << "update() for step " << output.step_id << ", latest schedule() was step " << step_id_
      << (step_in_flight_ ? "" : " (already updated)");
  step_in_flight_ = false;
  std::vector<RequestOutput> results;
  for (const ScheduledSeq& s : output.seqs) {
    auto it = requests_.find(s.id);
    if (it == requests_.end()) continue;  // finished or aborted while the step ran
    Request* r = it->second.get();
    KV_CHECK(r->status() == RequestStatus::kRunning) << "request " << s.id;
    KV_CHECK_EQ(r->num_computed_tokens(), s.num_computed_tokens) << "request " << s.id;
    r->advance_computed(s.num_new_tokens);
    if (kv_->is_detached(r->id())) {
      kv_->commit_detached(r->id(), r->num_kv_slots());
    } else {
      kv_->commit(r->id(), r->all_token_ids(), r->num_computed_tokens());
    }
    RequestOutput result;
    result.id = r->id();
    result.num_cached_prompt_tokens = r->num_cached_prompt_tokens();
    if (auto pl = model.prompt_logits.find(s.id); pl != model.prompt_logits.end()) {
      KV_CHECK_EQ(pl->second.first_position, r->prompt_logits_next()) << "request " << s.id;
      r->advance_prompt_logits(pl->second.first_position + pl->second.num_rows);
      result.prompt_logits = std::move(pl->second);
    }
    FinishReason reason = FinishReason::kNone;
    if (auto err = model.grammar_errors.find(s.id); s.samples && err != model.grammar_errors.end()) {
      reason = FinishReason::kError;
      result.error = err->second;
    } else if (s.samples) {
      auto sampled = model.sampled.find(s.id);
      KV_CHECK(sampled != model.sampled.end()) << "no sampled token for request " << s.id;
      const TokenId token = sampled->second;
      r->append_output_token(token);
      result.new_token_ids.push_back(token);
      if (auto lp = model.logprobs.find(s.id); lp != model.logprobs.end()) {
        result.logprobs.push_back(lp->second);
      }
      reason = check_stop(r, token);
      if (reason == FinishReason::kNone && model.grammar_stopped.count(s.id) != 0) {
        r->set_stop_token(token);
        reason = FinishReason::kStop;
      }
    } else if (r->input().is_scoring() && r->num_computed_tokens() == r->num_tokens()) {
      reason = FinishReason::kLength;  // the prompt is scored: nothing to sample
    } else if (result.prompt_logits.num_rows == 0) {
      continue;  // a prefill chunk: nothing to report
    }
    if (reason != FinishReason::kNone) {
      result.finish_reason = reason;
      result.stop_token_id = r->stop_token_id();
      result.num_kv_tokens = r->num_kv_slots();
      result.num_kv_tokens_evicted = r->num_evicted_tokens();
      result.num_kv_blocks = kv_->block_table(r->id()).num_blocks();
      remove(r, reason);  // deletes r
    }
    results.push_back(std::move(result));
  }
  return results;
}

void Scheduler::record_compaction(SeqId id, int64_t num_kv_slots,
                                  std::vector<int64_t> layer_key_begin,
                                  int64_t num_evicted_tokens) {
  KV_CHECK(!step_in_flight_) << "compaction of request " << id << " during a step";
  auto it = requests_.find(id);
  KV_CHECK(it != requests_.end()) << "compaction of unknown request " << id;
  Request* r = it->second.get();
  KV_CHECK_EQ(kv_->block_table(id).num_tokens(), num_kv_slots) << "request " << id;
  r->compacted(num_kv_slots, std::move(layer_key_begin), num_evicted_tokens);
}

void Scheduler::preempt_running(SeqId id) {
  KV_CHECK(!step_in_flight_) << "preemption of request " << id << " during a step";
  auto it = requests_.find(id);
  KV_CHECK(it != requests_.end()) << "preemption of unknown request " << id;
  Request* r = it->second.get();
  KV_CHECK(r->status() == RequestStatus::kRunning) << "request " << id;
  kv_->free(id);
  running_.erase(std::find(running_.begin(), running_.end(), r));
  r->preempt();
  ++num_preemptions_total_;
  preempted_since_schedule_.push_back(id);
  insert_waiting(r);
}

bool Scheduler::finish_request(SeqId id, FinishReason reason) {
  KV_CHECK(reason != FinishReason::kNone);
  auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  remove(it->second.get(), reason);
  return true;
}

void Scheduler::remove(Request* r, FinishReason reason) {
  if (r->status() == RequestStatus::kRunning) {
    kv_->free(r->id());
    running_.erase(std::find(running_.begin(), running_.end(), r));
  } else {
    auto it = std::find(waiting_.begin(), waiting_.end(), r);
    KV_CHECK(it != waiting_.end()) << "request " << r->id() << " in no queue";
    waiting_.erase(it);
  }
  r->finish(reason);
  finished_since_schedule_.push_back(r->id());
  requests_.erase(r->id());
}

bool Scheduler::set_held(SeqId id, bool held) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  Request* r = it->second.get();
  if (r->status() != RequestStatus::kWaiting && r->status() != RequestStatus::kPreempted) {
    return false;
  }
  r->set_held(held);
  return true;
}

const std::vector<uint64_t>& Scheduler::block_hashes(SeqId id, int64_t num_blocks) {
  auto it = requests_.find(id);
  KV_CHECK(it != requests_.end()) << "block_hashes of unknown request " << id;
  return it->second->block_hashes(num_blocks, kv_->block_size());
}

std::vector<SeqId> Scheduler::waiting_ids() const {
  std::vector<SeqId> ids;
  ids.reserve(waiting_.size());
  for (const Request* r : waiting_) ids.push_back(r->id());
  return ids;
}

const Request* Scheduler::request(SeqId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  s.num_running = num_running();
  s.num_waiting = num_waiting();
  for (const Request* r : waiting_) {
    if (r->status() == RequestStatus::kPreempted) ++s.num_preempted_waiting;
  }
  s.num_preemptions_total = num_preemptions_total_;
  s.num_steps = num_steps_;
  s.num_scheduled_tokens_total = num_scheduled_tokens_total_;
  s.num_prefix_deferrals_total = num_prefix_deferrals_total_;
  return s;
}

void Scheduler::check_invariants() const {
  KV_CHECK_EQ(requests_.size(), waiting_.size() + running_.size());
  KV_CHECK_LE(num_running(), config_.max_num_seqs);
  KV_CHECK_EQ(kv_->num_sequences(), num_running());
  std::unordered_set<const Request*> seen;
  auto check_request = [&](const Request* r) {
    KV_CHECK(seen.insert(r).second) << "request " << r->id() << " queued twice";
    auto it = requests_.find(r->id());
    KV_CHECK(it != requests_.end() && it->second.get() == r) << "request " << r->id();
    KV_CHECK_EQ(r->num_tokens(), r->num_prompt_tokens() + r->num_output_tokens());
    KV_CHECK(std::equal(r->prompt_ids().begin(), r->prompt_ids().end(),
                        r->all_token_ids().begin()));
    KV_CHECK(std::equal(r->output_ids().begin(), r->output_ids().end(),
                        r->all_token_ids().begin() + r->num_prompt_tokens()));
    if (r->input().kv_policy.method == KvEvictionMethod::kStreaming) {
      // no length limit (positions within the cache)
    } else if (r->input().is_scoring()) {
      KV_CHECK_LE(r->num_tokens(), config_.max_model_len) << "request " << r->id();
      KV_CHECK_EQ(r->num_output_tokens(), 0) << "request " << r->id();
    } else {
      KV_CHECK_LT(r->num_tokens(), config_.max_model_len) << "request " << r->id();
      KV_CHECK_LT(r->num_output_tokens(), r->input().max_tokens) << "request " << r->id();
    }
    KV_CHECK(0 <= r->num_cached_tokens() && r->num_cached_tokens() <= r->num_computed_tokens())
        << "request " << r->id();
    KV_CHECK_LE(r->num_computed_tokens(), r->num_tokens()) << "request " << r->id();
    KV_CHECK(r->finish_reason() == FinishReason::kNone);
  };
  for (const Request* r : waiting_) {
    check_request(r);
    KV_CHECK(r->status() == RequestStatus::kWaiting || r->status() == RequestStatus::kPreempted)
        << "request " << r->id() << " " << RequestStatusName(r->status());
    KV_CHECK_EQ(r->num_computed_tokens(), 0) << "request " << r->id();
    KV_CHECK(!kv_->has_sequence(r->id())) << "waiting request " << r->id() << " holds blocks";
  }
  for (size_t i = 1; i < waiting_.size(); ++i) {
    KV_CHECK(!runs_before(*waiting_[i], *waiting_[i - 1])) << "waiting queue out of order";
  }
  for (const Request* r : running_) {
    check_request(r);
    KV_CHECK(r->status() == RequestStatus::kRunning) << "request " << r->id();
    KV_CHECK(kv_->has_sequence(r->id())) << "running request " << r->id() << " has no blocks";
    const BlockTable& table = kv_->block_table(r->id());
    KV_CHECK_EQ(table.num_tokens(), r->num_kv_slots()) << "request " << r->id();
    KV_CHECK_LE(r->num_kv_slots(), table.capacity_tokens()) << "request " << r->id();
    KV_CHECK_LT(r->num_computed_tokens(), r->num_tokens()) << "request " << r->id();
  }
  kv_->check_invariants();
}

}  // namespace kvserve

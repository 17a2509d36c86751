// Test-only: the scheduler scenario harness shared by scheduler_test.cc and
// scheduler_property_test.cc: a Scheduler over a KvCacheManager driven by FakeModelRunner (fake
// KV contents, tokens that depend only on (request id, position)), with the oracle of what a
// request must produce.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "runtime/fake_model_runner.h"
#include "runtime/scheduler.h"

namespace kvserve::scheduler_testing {

constexpr TokenId kEos = 2;

struct Scenario {
  int64_t num_blocks = 64;
  int64_t block_size = 4;
  bool enable_prefix_caching = true;
  SchedulerConfig config;
  FakeModelRunnerOptions runner;
};

inline Scenario DefaultSetup() {
  Scenario s;
  s.config.max_num_batched_tokens = 64;
  s.config.max_num_seqs = 8;
  s.config.max_model_len = 64;
  s.config.model_namespace = "test-model";
  s.config.eos_token_ids = {kEos};
  s.runner.eos_id = kEos;
  return s;
}

// Prompt tokens 100 + base + i (distinct from kEos and small ids used as stop tokens).
inline std::vector<TokenId> Prompt(int64_t n, TokenId base = 0) {
  std::vector<TokenId> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(static_cast<TokenId>(100 + base + i));
  return p;
}

inline RequestInput Input(std::vector<TokenId> prompt, int64_t max_tokens) {
  RequestInput in;
  in.prompt_ids = std::move(prompt);
  in.max_tokens = max_tokens;
  return in;
}

struct Expected {
  std::vector<TokenId> output;
  FinishReason reason = FinishReason::kNone;
};

// What a request must produce, computed without the scheduler: FakeModelRunner's tokens until
// a token-level stop condition.
inline Expected Oracle(SeqId id, const RequestInput& in, const Scenario& s) {
  Expected e;
  int64_t num_tokens = static_cast<int64_t>(in.prompt_ids.size());
  while (true) {
    const TokenId t = FakeModelRunner::token_for(id, num_tokens, s.runner);
    e.output.push_back(t);
    ++num_tokens;
    const auto& eos = s.config.eos_token_ids;
    if ((!in.ignore_eos && std::find(eos.begin(), eos.end(), t) != eos.end()) ||
        std::find(in.stop_token_ids.begin(), in.stop_token_ids.end(), t) !=
            in.stop_token_ids.end()) {
      e.reason = FinishReason::kStop;
      return e;
    }
    if (static_cast<int64_t>(e.output.size()) >= in.max_tokens ||
        num_tokens >= s.config.max_model_len) {
      e.reason = FinishReason::kLength;
      return e;
    }
  }
}

// A KvCacheManager, a Scheduler and a FakeModelRunner, plus the checks every step must pass.
class Harness {
 public:
  explicit Harness(const Scenario& setup)
      : setup_(setup),
        kv_(KvCacheManagerOptions{setup.num_blocks, setup.block_size,
                                  setup.enable_prefix_caching}),
        runner_(setup.runner, &kv_) {
    auto scheduler = Scheduler::Create(setup.config, &kv_);
    KV_CHECK(scheduler.ok()) << scheduler.status().ToString();
    scheduler_ = std::move(scheduler).value();
  }

  Status add(SeqId id, RequestInput input) {
    RequestInput copy = input;
    Status status = scheduler_->add_request(id, std::move(input));
    if (status.ok()) {
      inputs_[id] = std::move(copy);
      live_.insert(id);
    }
    return status;
  }
  bool abort(SeqId id) { return finish(id, FinishReason::kAbort); }
  // Ends a request as the engine does (abort, or kStop for a stop string): its output so far
  // must be a prefix of the oracle's.
  bool finish(SeqId id, FinishReason reason) {
    const bool known = scheduler_->finish_request(id, reason);
    if (known) {
      live_.erase(id);
      aborted_.insert(id);
    }
    scheduler_->check_invariants();
    return known;
  }

  // One engine step: schedule, execute, update, with the per-step checks.
  SchedulerOutput step() {
    const SchedulerConfig& c = setup_.config;
    // Requests in the decode phase before the step (one token to compute).
    std::vector<SeqId> decodes;
    for (SeqId id : live_) {
      const Request* r = scheduler_->request(id);
      if (r->status() == RequestStatus::kRunning &&
          r->num_tokens() - r->num_computed_tokens() == 1) {
        decodes.push_back(id);
      }
    }

    SchedulerOutput out = scheduler_->schedule();
    ++num_steps_;
    int64_t sum = 0;
    std::set<SeqId> ids;
    for (const ScheduledSeq& s : out.seqs) {
      EXPECT_GE(s.num_new_tokens, 1);
      sum += s.num_new_tokens;
      EXPECT_TRUE(ids.insert(s.id).second) << "request " << s.id << " scheduled twice";
      if (c.enable_chunked_prefill && c.long_prefill_token_threshold > 0) {
        EXPECT_LE(s.num_new_tokens, c.long_prefill_token_threshold);
      }
      if (!c.enable_chunked_prefill) {
        const Request* r = scheduler_->request(s.id);
        EXPECT_EQ(s.num_computed_tokens + s.num_new_tokens, r->num_tokens())
            << "prompt of request " << s.id << " split without chunked prefill";
      }
    }
    max_seqs_seen_ = std::max<int64_t>(max_seqs_seen_, static_cast<int64_t>(out.seqs.size()));
    max_tokens_seen_ = std::max(max_tokens_seen_, out.num_scheduled_tokens);
    EXPECT_EQ(sum, out.num_scheduled_tokens);
    EXPECT_LE(out.num_scheduled_tokens, c.max_num_batched_tokens);
    EXPECT_LE(static_cast<int64_t>(out.seqs.size()), c.max_num_seqs);
    // Decodes are never starved by prefill chunks: each is scheduled (one token) or preempted.
    std::set<SeqId> preempted(out.preempted_ids.begin(), out.preempted_ids.end());
    if (static_cast<int64_t>(decodes.size()) <= c.max_num_batched_tokens) {
      for (SeqId id : decodes) {
        EXPECT_TRUE(ids.count(id) == 1 || preempted.count(id) == 1)
            << "decode of request " << id << " not scheduled in step " << num_steps_;
      }
    }
    // Victims are the newest (lowest priority) running requests.
    for (SeqId p : out.preempted_ids) {
      const Request* victim = scheduler_->request(p);
      ++num_preemptions_;
      for (SeqId id : live_) {
        const Request* r = scheduler_->request(id);
        if (r->status() != RequestStatus::kRunning) continue;
        EXPECT_TRUE(priority_key(*r) < priority_key(*victim))
            << "preempted " << p << " while newer " << id << " keeps running";
      }
      // Committed output survives preemption.
      EXPECT_EQ(victim->output_ids(), streamed_[p]);
    }

    ModelOutput model = runner_.execute(out, *scheduler_);
    std::vector<RequestOutput> results = scheduler_->update(out, model);
    for (const RequestOutput& o : results) {
      auto& stream = streamed_[o.id];
      stream.insert(stream.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      if (o.finished()) {
        EXPECT_EQ(scheduler_->request(o.id), nullptr);
        finished_[o.id] = o.finish_reason;
        cached_prompt_tokens_[o.id] = o.num_cached_prompt_tokens;
        live_.erase(o.id);
      }
    }
    scheduler_->check_invariants();
    kv_.check_invariants();
    for (const std::string& e : runner_.errors()) ADD_FAILURE() << e;
    if (!runner_.errors().empty()) abort_all_checks_ = true;
    return out;
  }

  // Steps until nothing is left; false if that takes more than max_steps.
  bool run(int64_t max_steps = 100000) {
    for (int64_t i = 0; i < max_steps && scheduler_->has_unfinished(); ++i) {
      step();
      if (abort_all_checks_) return false;
    }
    return !scheduler_->has_unfinished();
  }

  // Every finished (not aborted) request produced what the oracle says; aborted ones a prefix.
  void expect_outputs_match_oracle() const {
    for (const auto& [id, input] : inputs_) {
      const Expected e = Oracle(id, input, setup_);
      auto it = streamed_.find(id);
      const std::vector<TokenId> got = it == streamed_.end() ? std::vector<TokenId>{} : it->second;
      if (aborted_.count(id)) {
        ASSERT_LE(got.size(), e.output.size()) << "request " << id;
        EXPECT_TRUE(std::equal(got.begin(), got.end(), e.output.begin())) << "request " << id;
        continue;
      }
      EXPECT_EQ(got, e.output) << "request " << id;
      auto f = finished_.find(id);
      ASSERT_NE(f, finished_.end()) << "request " << id << " never finished";
      EXPECT_EQ(FinishReasonName(f->second), std::string(FinishReasonName(e.reason)))
          << "request " << id;
    }
  }

  // Once everything ended: no sequence, no block in use.
  void expect_no_leaks() const {
    EXPECT_FALSE(scheduler_->has_unfinished());
    EXPECT_EQ(kv_.num_sequences(), 0);
    const KvCacheManagerStats st = kv_.stats();
    EXPECT_EQ(st.blocks_in_use, 0);
    EXPECT_EQ(st.blocks_free + st.blocks_cached, setup_.num_blocks);
    if (!setup_.enable_prefix_caching) {
      EXPECT_EQ(st.blocks_cached, 0);
    }
    kv_.check_invariants();
  }

  Scheduler& scheduler() { return *scheduler_; }
  KvCacheManager& kv() { return kv_; }
  FakeModelRunner& runner() { return runner_; }
  const std::vector<TokenId>& streamed(SeqId id) { return streamed_[id]; }
  FinishReason finish_reason(SeqId id) const {
    auto it = finished_.find(id);
    return it == finished_.end() ? FinishReason::kNone : it->second;
  }
  int64_t cached_prompt_tokens(SeqId id) const { return cached_prompt_tokens_.at(id); }
  int64_t num_steps() const { return num_steps_; }
  int64_t num_preemptions() const { return num_preemptions_; }
  int64_t max_seqs_seen() const { return max_seqs_seen_; }
  int64_t max_tokens_seen() const { return max_tokens_seen_; }

 private:
  std::pair<int64_t, int64_t> priority_key(const Request& r) const {
    const int64_t priority =
        setup_.config.policy == SchedulingPolicy::kPriority ? r.input().priority : 0;
    return {priority, r.arrival_seq()};
  }

  Scenario setup_;
  KvCacheManager kv_;
  FakeModelRunner runner_;
  std::unique_ptr<Scheduler> scheduler_;
  std::map<SeqId, RequestInput> inputs_;
  std::set<SeqId> live_;
  std::set<SeqId> aborted_;
  std::map<SeqId, std::vector<TokenId>> streamed_;
  std::map<SeqId, FinishReason> finished_;
  std::map<SeqId, int64_t> cached_prompt_tokens_;
  int64_t num_steps_ = 0;
  int64_t num_preemptions_ = 0;
  int64_t max_seqs_seen_ = 0;
  int64_t max_tokens_seen_ = 0;
  bool abort_all_checks_ = false;
};

inline const ScheduledSeq* Find(const SchedulerOutput& out, SeqId id) {
  for (const ScheduledSeq& s : out.seqs) {
    if (s.id == id) return &s;
  }
  return nullptr;
}

}  // namespace kvserve::scheduler_testing

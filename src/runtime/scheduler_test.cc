// Scheduler scenario tests, driven by FakeModelRunner through the harness of
// scheduler_test_util.h.
#include "runtime/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "runtime/scheduler_test_util.h"

namespace kvserve {
namespace {

using namespace scheduler_testing;  // NOLINT: the harness of these tests

// ---------------------------------------------------------------------------------------------
// Configuration and admission errors

TEST(SchedulerConfigTest, Validate) {
  SchedulerConfig c;
  EXPECT_TRUE(c.Validate().ok());
  c.max_num_batched_tokens = 0;
  EXPECT_EQ(c.Validate().code(), StatusCode::kInvalidArgument);
  c = SchedulerConfig();
  c.max_num_seqs = 0;
  EXPECT_FALSE(c.Validate().ok());
  c = SchedulerConfig();
  c.max_num_batched_tokens = 8;
  c.max_num_seqs = 16;
  EXPECT_NE(c.Validate().message().find("max_num_seqs"), std::string::npos);
  c = SchedulerConfig();
  c.long_prefill_token_threshold = -1;
  EXPECT_FALSE(c.Validate().ok());
  // Without chunked prefill the budget must hold a max_model_len prompt.
  c = SchedulerConfig();
  c.enable_chunked_prefill = false;
  c.max_num_batched_tokens = 512;
  c.max_model_len = 2048;
  c.max_num_seqs = 16;
  const Status st = c.Validate();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("chunked prefill"), std::string::npos) << st.message();
  c.enable_chunked_prefill = true;
  EXPECT_TRUE(c.Validate().ok());
}

TEST(SchedulerTest, CreateRejectsCacheSmallerThanOneSequence) {
  KvCacheManager kv(KvCacheManagerOptions{4, 4, true});  // 16 tokens
  SchedulerConfig c;
  c.max_model_len = 17;
  c.max_num_batched_tokens = 32;
  c.max_num_seqs = 4;
  auto s = Scheduler::Create(c, &kv);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("max-model-len"), std::string::npos);
  c.max_model_len = 16;
  EXPECT_TRUE(Scheduler::Create(c, &kv).ok());
}

TEST(SchedulerTest, AddRequestRejectsBadInputWithClearErrors) {
  Scenario s = DefaultSetup();
  s.config.max_model_len = 32;
  Harness h(s);
  EXPECT_EQ(h.add(1, Input({}, 4)).code(), StatusCode::kInvalidArgument);
  // A prompt that leaves no room for one output token is rejected, never truncated.
  Status too_long = h.add(2, Input(Prompt(40), 4));
  EXPECT_EQ(too_long.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("40 tokens"), std::string::npos) << too_long.message();
  EXPECT_NE(too_long.message().find("max-model-len 32"), std::string::npos) << too_long.message();
  EXPECT_FALSE(h.add(3, Input(Prompt(32), 4)).ok());
  EXPECT_EQ(h.add(4, Input(Prompt(4), 0)).code(), StatusCode::kInvalidArgument);
  RequestInput bad_sampling = Input(Prompt(4), 4);
  bad_sampling.sampling.temperature = -1.0f;
  EXPECT_FALSE(h.add(5, bad_sampling).ok());
  // Nothing was queued by the failures.
  EXPECT_FALSE(h.scheduler().has_unfinished());
  // The longest prompt that fits: one output token.
  ASSERT_TRUE(h.add(6, Input(Prompt(31), 100)).ok());
  EXPECT_EQ(h.add(6, Input(Prompt(4), 4)).code(), StatusCode::kInvalidArgument);  // duplicate
  ASSERT_TRUE(h.run());
  EXPECT_EQ(h.streamed(6).size(), 1u);
  EXPECT_EQ(h.finish_reason(6), FinishReason::kLength);
  h.expect_no_leaks();
}

// ---------------------------------------------------------------------------------------------
// Stop conditions

TEST(SchedulerTest, SingleRequestPrefillsThenDecodesToMaxTokens) {
  Harness h(DefaultSetup());
  ASSERT_TRUE(h.add(1, Input(Prompt(10), 5)).ok());
  SchedulerOutput first = h.step();
  ASSERT_EQ(first.seqs.size(), 1u);
  EXPECT_EQ(first.seqs[0].num_computed_tokens, 0);
  EXPECT_EQ(first.seqs[0].num_new_tokens, 10);
  EXPECT_TRUE(first.seqs[0].samples);
  for (int i = 0; i < 4; ++i) {
    SchedulerOutput out = h.step();
    ASSERT_EQ(out.seqs.size(), 1u);
    EXPECT_EQ(out.seqs[0].num_computed_tokens, 10 + i);
    EXPECT_EQ(out.seqs[0].num_new_tokens, 1);
  }
  EXPECT_FALSE(h.scheduler().has_unfinished());
  EXPECT_EQ(h.streamed(1).size(), 5u);
  EXPECT_EQ(h.finish_reason(1), FinishReason::kLength);
  // The runner learns about the finished request at the next step.
  EXPECT_EQ(h.scheduler().schedule().finished_ids, std::vector<SeqId>{1});
  h.expect_outputs_match_oracle();
  h.expect_no_leaks();
}

// Finds a request id whose fake output hits `token` at output index `index` at the earliest.
SeqId IdWhoseOutputStartsWith(const Scenario& s, int64_t prompt_len, TokenId token,
                              int64_t* index) {
  for (SeqId id = 1; id < 100000; ++id) {
    for (int64_t i = 0; i < 6; ++i) {
      if (FakeModelRunner::token_for(id, prompt_len + i, s.runner) == token) {
        *index = i;
        return id;
      }
    }
  }
  return -1;
}

TEST(SchedulerTest, EosStopsUnlessIgnoreEos) {
  Scenario s = DefaultSetup();
  s.runner.eos_one_in = 5;
  int64_t eos_index = 0;
  const SeqId id = IdWhoseOutputStartsWith(s, 6, kEos, &eos_index);
  ASSERT_GT(id, 0);
  Harness h(s);
  ASSERT_TRUE(h.add(id, Input(Prompt(6), 20)).ok());
  RequestInput ignoring = Input(Prompt(6), 20);
  ignoring.ignore_eos = true;
  ASSERT_TRUE(h.add(id + 100000, ignoring).ok());  // another id: its own tokens
  ASSERT_TRUE(h.run());
  ASSERT_EQ(static_cast<int64_t>(h.streamed(id).size()), eos_index + 1);
  EXPECT_EQ(h.streamed(id).back(), kEos);  // kept in the output, as vLLM does
  EXPECT_EQ(h.finish_reason(id), FinishReason::kStop);
  EXPECT_EQ(h.streamed(id + 100000).size(), 20u);
  EXPECT_EQ(h.finish_reason(id + 100000), FinishReason::kLength);
  h.expect_outputs_match_oracle();
  h.expect_no_leaks();
}

TEST(SchedulerTest, StopTokenIdsStopAndAreReported) {
  Scenario s = DefaultSetup();
  Harness h(s);
  // The request's third output token becomes a stop token.
  const TokenId stop = FakeModelRunner::token_for(7, 8 + 2, s.runner);
  RequestInput in = Input(Prompt(8), 20);
  in.stop_token_ids = {stop};
  in.ignore_eos = true;  // stop_token_ids apply even with ignore_eos
  ASSERT_TRUE(h.add(7, in).ok());
  std::vector<RequestOutput> last;
  while (h.scheduler().has_unfinished()) {
    SchedulerOutput out = h.scheduler().schedule();
    ModelOutput model = h.runner().execute(out, h.scheduler());
    last = h.scheduler().update(out, model);
  }
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ(last[0].stop_token_id, stop);
  h.expect_no_leaks();
}

TEST(SchedulerTest, MaxModelLenClipsMaxTokens) {
  Scenario s = DefaultSetup();
  s.config.max_model_len = 20;
  Harness h(s);
  ASSERT_TRUE(h.add(1, Input(Prompt(12), 1000)).ok());
  ASSERT_TRUE(h.run());
  EXPECT_EQ(h.streamed(1).size(), 8u);  // 12 + 8 == max_model_len
  EXPECT_EQ(h.finish_reason(1), FinishReason::kLength);
  h.expect_outputs_match_oracle();
  h.expect_no_leaks();
}

TEST(SchedulerTest, EngineFinishesRequestForStopString) {
  Harness h(DefaultSetup());
  ASSERT_TRUE(h.add(1, Input(Prompt(10), 30)).ok());
  ASSERT_TRUE(h.add(2, Input(Prompt(10, 50), 30)).ok());
  for (int i = 0; i < 3; ++i) h.step();
  EXPECT_TRUE(h.finish(1, FinishReason::kStop));
  EXPECT_EQ(h.scheduler().request(1), nullptr);
  EXPECT_FALSE(h.finish(1, FinishReason::kStop));
  h.scheduler().check_invariants();
  SchedulerOutput out = h.step();
  EXPECT_EQ(out.finished_ids, std::vector<SeqId>{1});
  EXPECT_EQ(Find(out, 1), nullptr);
  EXPECT_NE(Find(out, 2), nullptr);
  ASSERT_TRUE(h.run());
  h.expect_no_leaks();
}

// ---------------------------------------------------------------------------------------------
// Ordering

std::vector<SeqId> FirstScheduledOrder(Harness& h) {
  std::vector<SeqId> order;
  std::set<SeqId> seen;
  while (h.scheduler().has_unfinished()) {
    for (const ScheduledSeq& s : h.step().seqs) {
      if (seen.insert(s.id).second) order.push_back(s.id);
    }
  }
  return order;
}

TEST(SchedulerTest, FcfsRunsInArrivalOrder) {
  Scenario s = DefaultSetup();
  s.config.max_num_seqs = 1;
  Harness h(s);
  const int64_t priorities[] = {5, 0, 5, -1};
  for (SeqId id = 1; id <= 4; ++id) {
    RequestInput in = Input(Prompt(6, static_cast<TokenId>(id * 10)), 3);
    in.priority = priorities[id - 1];  // ignored under FCFS
    ASSERT_TRUE(h.add(id, in).ok());
  }
  EXPECT_EQ(FirstScheduledOrder(h), (std::vector<SeqId>{1, 2, 3, 4}));
  EXPECT_EQ(h.max_seqs_seen(), 1);
  h.expect_outputs_match_oracle();
  h.expect_no_leaks();
}

TEST(SchedulerTest, PriorityRunsLowestValueFirstThenArrival) {
  Scenario s = DefaultSetup();
  s.config.max_num_seqs = 1;
  s.config.policy = SchedulingPolicy::kPriority;
  Harness h(s);
  const int64_t priorities[] = {5, 0, 5, -1};
  for (SeqId id = 1; id <= 4; ++id) {
    RequestInput in = Input(Prompt(6, static_cast<TokenId>(id * 10)), 3);
    in.priority = priorities[id - 1];
    ASSERT_TRUE(h.add(id, in).ok());
  }
  EXPECT_EQ(FirstScheduledOrder(h), (std::vector<SeqId>{4, 2, 1, 3}));
  h.expect_outputs_match_oracle();
  h.expect_no_leaks();
}

TEST(SchedulerTest, MaxNumSeqsCapsRunningRequests) {
  Scenario s = DefaultSetup();
  s.config.max_num_seqs = 2;
  Harness h(s);
  for (SeqId id = 1; id <= 5; ++id) ASSERT_TRUE(h.add(id, Input(Prompt(4), 6)).ok());
  ASSERT_TRUE(h.run());
  EXPECT_EQ(h.max_seqs_seen(), 2);
  h.expect_outputs_match_oracle();
  h.expect_no_leaks();
}

// ---------------------------------------------------------------------------------------------
// Chunked prefill

TEST(SchedulerTest, ChunkedPrefillSplitsLongPromptWithoutStallingDecodes) {
  Scenario s = DefaultSetup();
  s.config.max_num_batched_tokens = 16;
  s.config.max_model_len = 128;
  s.num_blocks = 64;
  Harness h(s);
  ASSERT_TRUE(h.add(1, Input(Prompt(4), 40)).ok());
  ASSERT_TRUE(h.add(2, Input(Prompt(4, 10), 40)).ok());
  h.step();  // both prompts, whole
  ASSERT_TRUE(h.add(3, Input(Prompt(100, 20), 4)).ok());
  std::vector<int64_t> chunks;
  while (h.scheduler().request(3)->num_output_tokens() == 0) {
    SchedulerOutput out = h.step();
    ASSERT_NE(Find(out, 1), nullptr);
    ASSERT_NE(Find(out, 2), nullptr);
    EXPECT_EQ(Find(out, 1)->num_new_tokens, 1);
    EXPECT_EQ(Find(out, 2)->num_new_tokens, 1);
    const ScheduledSeq* long_prompt = Find(out, 3);
    ASSERT_NE(long_prompt, nullptr);
    EXPECT_EQ(long_prompt->samples,
              long_prompt->num_computed_tokens + long_prompt->num_new_tokens == 100);
    chunks.push_back(long_prompt->num_new_tokens);
    EXPECT_EQ(out.num_scheduled_tokens, 2 + chunks.back());
  }
  // 100 tokens in chunks of 14 (16 minus the two decodes): 7 x 14 + 2.
  EXPECT_EQ(chunks, (std::vector<int64_t>{14, 14, 14, 14, 14, 14, 14, 2}));
  ASSERT_TRUE(h.run());
  h.expect_outputs_match_oracle();
  h.expect_no_leaks();
}

TEST(SchedulerTest, DecodesGoBeforeOlderPrefillChunks) {
  // The long prompt is admitted first (capped by the threshold), a short one joins in the
  // same step; from then on the short one's decodes come first in every step.
  Scenario s = DefaultSetup();
  s.config.max_num_batched_tokens = 12;
  s.config.max_num_seqs = 4;
  s.config.long_prefill_token_threshold = 10;
  s.config.max_model_len = 128;
  Harness h(s);
  ASSERT_TRUE(h.add(1, Input(Prompt(60), 2)).ok());
  ASSERT_TRUE(h.add(2, Input(Prompt(2, 70), 30)).ok());
  SchedulerOutput first = h.step();
  ASSERT_EQ(first.seqs.size(), 2u);
  EXPECT_EQ(first.seqs[0].id, 1);
  EXPECT_EQ(first.seqs[0].num_new_tokens, 10);
  EXPECT_EQ(first.seqs[1].num_new_tokens, 2);
  for (int i = 0; i < 4; ++i) {
    SchedulerOutput out = h.step();
    ASSERT_EQ(out.seqs.size(), 2u);
    EXPECT_EQ(out.seqs[0].id, 2);  // the decode first
    EXPECT_EQ(out.seqs[0].num_new_tokens, 1);
    EXPECT_EQ(out.seqs[1].id, 1);
    EXPECT_EQ(out.seqs[1].num_new_tokens, 10);
  }
  ASSERT_TRUE(h.run());
  h.expect_outputs_match_oracle();
  h.expect_no_leaks();
}

TEST(SchedulerTest, LongPrefillTokenThresholdCapsEachRequestPerStep) {
  Scenario s = DefaultSetup();
  s.config.max_num_batched_tokens = 64;
  s.config.long_prefill_token_threshold = 8;
  s.config.max_model_len = 128;
  Harness h(s);
  ASSERT_TRUE(h.add(1, Input(Prompt(50), 2)).ok());
  ASSERT_TRUE(h.add(2, Input(Prompt(20, 60), 2)).ok());
  SchedulerOutput first = h.step();
  ASSERT_EQ(first.seqs.size(), 2u);  // both get a share of the same step
  EXPECT_EQ(first.seqs[0].num_new_tokens, 8);
  EXPECT_EQ(first.seqs[1].num_new_tokens, 8);
  int64_t steps_to_first_token = 1;
  while (h.streamed(1).empty()) {
    h.step();
    ++steps_to_first_token;
  }
  EXPECT_EQ(steps_to_first_token, 7);  // ceil(50 / 8)
  ASSERT_TRUE(h.run());
  h.expect_outputs_match_oracle();
  h.expect_no_leaks();
}

TEST(SchedulerTest, WithoutChunkedPrefillPromptsRunWholeAndInOrder) {
  Scenario s = DefaultSetup();
  s.config.enable_chunked_prefill = false;
  s.config.max_num_batched_tokens = 32;
  s.config.max_model_len = 32;
  s.config.long_prefill_token_threshold = 4;  // no effect without chunked prefill
  Harness h(s);
  ASSERT_TRUE(h.add(1, Input(Prompt(10), 20)).ok());
  ASSERT_TRUE(h.add(2, Input(Prompt(30, 40), 2)).ok());
  ASSERT_TRUE(h.add(3, Input(Prompt(2, 80), 2)).ok());
  SchedulerOutput first = h.step();
  // 2 does not fit the 22 tokens left and is not split; 3 does not overtake it.
  ASSERT_EQ(first.seqs.size(), 1u);
  EXPECT_EQ(first.seqs[0].num_new_tokens, 10);
  SchedulerOutput second = h.step();
  ASSERT_EQ(second.seqs.size(), 2u);
  EXPECT_EQ(second.seqs[0].id, 1);
  EXPECT_EQ(second.seqs[1].id, 2);
  EXPECT_EQ(second.seqs[1].num_new_tokens, 30);
  EXPECT_EQ(Find(second, 3), nullptr);  // one token of budget left, its prompt has 2
  ASSERT_TRUE(h.run());
  h.expect_outputs_match_oracle();
  h.expect_no_leaks();
}

// ---------------------------------------------------------------------------------------------
// Preemption

TEST(SchedulerTest, PreemptsNewestFirstAndKeepsCommittedOutput) {
  Scenario s = DefaultSetup();
  s.block_size = 4;
  s.num_blocks = 8;  // 32 tokens
  s.config.max_model_len = 32;
  s.config.max_num_batched_tokens = 64;
  s.enable_prefix_caching = false;  // recompute everything after preemption
  Harness h(s);
  for (SeqId id = 1; id <= 3; ++id) {
    ASSERT_TRUE(h.add(id, Input(Prompt(8, static_cast<TokenId>(id * 10)), 12)).ok());
  }
  SchedulerOutput first = h.step();
  EXPECT_EQ(first.seqs.size(), 3u);  // 6 of 8 blocks
  // Position 8 needs a third block each: 1 and 2 get the last two, 3 (newest) is preempted.
  SchedulerOutput second = h.step();
  EXPECT_EQ(second.preempted_ids, std::vector<SeqId>{3});
  EXPECT_EQ(second.seqs.size(), 2u);
  const Request* r3 = h.scheduler().request(3);
  ASSERT_NE(r3, nullptr);
  EXPECT_EQ(r3->status(), RequestStatus::kPreempted);
  EXPECT_EQ(r3->num_output_tokens(), 1);  // its first token is kept
  EXPECT_EQ(r3->num_computed_tokens(), 0);
  ASSERT_TRUE(h.run());
  EXPECT_GE(h.num_preemptions(), 2);
  EXPECT_GT(h.runner().num_recomputed_tokens(), 0);
  EXPECT_GE(h.scheduler().stats().num_preemptions_total, 2);
  // Same tokens as an unconstrained run.
  h.expect_outputs_match_oracle();
  h.expect_no_leaks();
}

TEST(SchedulerTest, PreemptedRequestResumesFromItsCachedBlocks) {
  Scenario s = DefaultSetup();
  s.block_size = 4;
  s.num_blocks = 5;
  s.config.max_model_len = 20;
  s.config.max_num_batched_tokens = 32;
  Harness h(s);
  ASSERT_TRUE(h.add(1, Input(Prompt(8), 5)).ok());       // 13 tokens, 3 blocks
  ASSERT_TRUE(h.add(2, Input(Prompt(8, 50), 10)).ok());  // 18 tokens, 5 blocks
  h.step();                                              // 4 blocks in use
  SchedulerOutput second = h.step();                     // 1 takes the last block
  EXPECT_EQ(second.preempted_ids, std::vector<SeqId>{2});
  // 2 waits until 1 finishes, then resumes from its two cached prompt blocks.
  const ScheduledSeq* resumed = nullptr;
  SchedulerOutput out;
  while (resumed == nullptr) {
    out = h.step();
    resumed = Find(out, 2);
  }
  EXPECT_EQ(h.finish_reason(1), FinishReason::kLength);
  EXPECT_EQ(resumed->num_computed_tokens, 8);
  EXPECT_EQ(resumed->num_new_tokens, 1);  // its first output token
  EXPECT_TRUE(resumed->samples);
  EXPECT_EQ(h.scheduler().request(2)->num_cached_tokens(), 8);
  ASSERT_TRUE(h.run());
  EXPECT_EQ(h.cached_prompt_tokens(2), 0);  // first admission: nothing was cached
  h.expect_outputs_match_oracle();
  h.expect_no_leaks();
}

// ---------------------------------------------------------------------------------------------
// Abort

TEST(SchedulerTest, AbortReturnsAllBlocksInEveryState) {
  Scenario s = DefaultSetup();
  s.block_size = 4;
  s.num_blocks = 12;
  s.config.max_model_len = 40;
  s.config.max_num_batched_tokens = 16;
  s.config.max_num_seqs = 4;
  Harness h(s);
  ASSERT_TRUE(h.add(1, Input(Prompt(4), 30)).ok());       // decoding
  ASSERT_TRUE(h.add(2, Input(Prompt(30, 40), 5)).ok());   // prefilling in chunks
  ASSERT_TRUE(h.add(3, Input(Prompt(10, 80), 30)).ok());
  ASSERT_TRUE(h.add(4, Input(Prompt(5, 120), 5)).ok());
  h.step();
  h.step();
  EXPECT_EQ(h.scheduler().request(1)->status(), RequestStatus::kRunning);
  EXPECT_EQ(h.scheduler().request(2)->status(), RequestStatus::kRunning);
  EXPECT_LT(h.scheduler().request(2)->num_computed_tokens(), 30);
  EXPECT_TRUE(h.abort(2));  // mid-prefill
  EXPECT_FALSE(h.abort(2));
  EXPECT_FALSE(h.abort(99));
  for (int i = 0; i < 6 && h.scheduler().request(1) != nullptr; ++i) h.step();
  // Whatever state each request is in now (running, waiting, preempted), abort frees it.
  for (SeqId id : {1, 3, 4}) {
    if (h.scheduler().request(id) != nullptr) {
      EXPECT_TRUE(h.abort(id));
    }
  }
  EXPECT_FALSE(h.scheduler().has_unfinished());
  h.expect_no_leaks();
  // Also an abort of a never-scheduled request, and one while its step is in flight.
  ASSERT_TRUE(h.add(10, Input(Prompt(6), 4)).ok());
  EXPECT_TRUE(h.abort(10));
  ASSERT_TRUE(h.add(11, Input(Prompt(6), 4)).ok());
  SchedulerOutput out = h.scheduler().schedule();
  ASSERT_NE(Find(out, 11), nullptr);
  ModelOutput model = h.runner().execute(out, h.scheduler());
  EXPECT_TRUE(h.abort(11));
  EXPECT_TRUE(h.scheduler().update(out, model).empty());
  h.scheduler().check_invariants();
  h.expect_no_leaks();
  h.expect_outputs_match_oracle();
}

// ---------------------------------------------------------------------------------------------
// Prefix cache

TEST(SchedulerTest, PrefixCacheHitSkipsCachedBlocks) {
  Scenario s = DefaultSetup();
  s.block_size = 4;
  Harness h(s);
  ASSERT_TRUE(h.add(1, Input(Prompt(10), 3)).ok());
  ASSERT_TRUE(h.run());
  EXPECT_EQ(h.cached_prompt_tokens(1), 0);

  struct Case {
    SeqId id;
    std::vector<TokenId> prompt;
    std::string salt;
    int64_t cached;
  };
  std::vector<TokenId> shared_then_new = Prompt(8);
  for (TokenId t : Prompt(5, 500)) shared_then_new.push_back(t);
  const std::vector<Case> cases = {
      {2, shared_then_new, "", 8},  // two full blocks shared
      {3, Prompt(10), "", 8},       // same prompt: the partial third block is computed
      {4, Prompt(8), "", 4},        // full hit: the last token is computed anyway
      {5, Prompt(10), "tenant-b", 0},  // another salt never shares
      {6, Prompt(3), "", 0},        // shorter than a block
  };
  for (const Case& c : cases) {
    RequestInput in = Input(c.prompt, 2);
    in.cache_salt = c.salt;
    ASSERT_TRUE(h.add(c.id, in).ok());
    SchedulerOutput out = h.step();
    const ScheduledSeq* seq = Find(out, c.id);
    ASSERT_NE(seq, nullptr) << "request " << c.id;
    EXPECT_EQ(seq->num_computed_tokens, c.cached) << "request " << c.id;
    EXPECT_EQ(seq->num_new_tokens, static_cast<int64_t>(c.prompt.size()) - c.cached)
        << "request " << c.id;
    EXPECT_EQ(h.scheduler().request(c.id)->num_cached_tokens(), c.cached);
    ASSERT_TRUE(h.run());
    EXPECT_EQ(h.cached_prompt_tokens(c.id), c.cached) << "request " << c.id;
  }
  EXPECT_GT(h.kv().stats().prefix_hits_tokens, 0);
  h.expect_outputs_match_oracle();
  h.expect_no_leaks();
}

TEST(SchedulerTest, RequestsSharingAnUncomputedPrefixWaitForItInsteadOfRecomputing) {
  Scenario s = DefaultSetup();
  s.block_size = 4;
  s.config.max_num_batched_tokens = 16;
  Harness h(s);
  // Three requests arrive together: 1 and 2 share a 40-token prompt nobody has computed, 3 is
  // unrelated. 1 prefills in chunks of 16; 2 waits (3 overtakes it) until 1's prompt is in
  // the cache, then reuses all of it but the block holding its last token.
  ASSERT_TRUE(h.add(1, Input(Prompt(40), 2)).ok());
  ASSERT_TRUE(h.add(2, Input(Prompt(40), 2)).ok());
  ASSERT_TRUE(h.add(3, Input(Prompt(6, 700), 2)).ok());
  SchedulerOutput first = h.step();
  ASSERT_NE(Find(first, 1), nullptr);
  EXPECT_EQ(Find(first, 2), nullptr);
  ASSERT_TRUE(h.run());
  EXPECT_EQ(h.cached_prompt_tokens(1), 0);
  EXPECT_EQ(h.cached_prompt_tokens(2), 36);
  EXPECT_EQ(h.cached_prompt_tokens(3), 0);
  EXPECT_GT(h.scheduler().stats().num_prefix_deferrals_total, 0);
  h.expect_outputs_match_oracle();
  h.expect_no_leaks();

  // Without prefix caching nobody waits.
  s.enable_prefix_caching = false;
  Harness off(s);
  ASSERT_TRUE(off.add(1, Input(Prompt(40), 2)).ok());
  ASSERT_TRUE(off.add(2, Input(Prompt(40), 2)).ok());
  SchedulerOutput step = off.step();
  EXPECT_NE(Find(step, 1), nullptr);
  ASSERT_TRUE(off.run());
  EXPECT_EQ(off.scheduler().stats().num_prefix_deferrals_total, 0);
}

TEST(SchedulerTest, PrefixCachingDisabledCachesNothing) {
  Scenario s = DefaultSetup();
  s.enable_prefix_caching = false;
  Harness h(s);
  for (SeqId id = 1; id <= 3; ++id) {
    ASSERT_TRUE(h.add(id, Input(Prompt(12), 3)).ok());
    SchedulerOutput out = h.step();
    ASSERT_NE(Find(out, id), nullptr);
    EXPECT_EQ(Find(out, id)->num_computed_tokens, 0);
    EXPECT_EQ(Find(out, id)->num_new_tokens, 12);
    ASSERT_TRUE(h.run());
    EXPECT_EQ(h.cached_prompt_tokens(id), 0);
    EXPECT_EQ(h.kv().stats().blocks_cached, 0);
  }
  EXPECT_EQ(h.kv().stats().prefix_hits_tokens, 0);
  h.expect_outputs_match_oracle();
  h.expect_no_leaks();
}

}  // namespace
}  // namespace kvserve

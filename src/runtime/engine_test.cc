// Engine and client behaviour on the synthetic "tiny" model (f32 KV): validation at submit,
// stop conditions (max tokens, stop token ids, stop strings, max_model_len), aborts by call,
// by dropping the stream and by destroying the engine, and the stats it publishes.
#include "runtime/engine.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kv/kv_storage.h"
#include "model/synthetic.h"

namespace kvserve {
namespace {

constexpr int64_t kMaxModelLen = 128;

struct Fixture {
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

Fixture& Get() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    SyntheticModelOptions o;
    o.preset = "tiny";
    o.seed = 3;
    auto loaded = MakeSyntheticModel(o);
    EXPECT_TRUE(loaded.ok());
    auto tok = Tokenizer::Create(*loaded->vocab);
    EXPECT_TRUE(tok.ok());
    fx->tokenizer = std::move(tok).value();
    auto m = LlamaModel::Create(std::move(loaded).value());
    EXPECT_TRUE(m.ok());
    fx->model = std::move(m).value();
    return fx;
  }();
  return *f;
}

PagedKvCache MakeCache(int64_t num_blocks = 32) {
  PagedKvCache cache;
  cache.spec = Get().model->kv_spec(DType::kF32, 16);
  cache.max_model_len = kMaxModelLen;
  cache.storage = std::move(KvStorage::Create(cache.spec, num_blocks)).value();
  return cache;
}

EngineOptions Options(bool with_tokenizer = true) {
  EngineOptions o;
  o.check_invariants = true;
  o.tokenizer = with_tokenizer ? Get().tokenizer.get() : nullptr;
  o.scheduler.max_model_len = kMaxModelLen;
  o.scheduler.max_num_batched_tokens = 256;
  o.scheduler.max_num_seqs = 8;
  return o;
}

RequestInput Greedy(int64_t max_tokens, int64_t prompt_len = 10) {
  RequestInput in;
  in.prompt_ids = SyntheticTokenIds(prompt_len, Get().model->config().vocab_size);
  in.max_tokens = max_tokens;
  in.ignore_eos = true;
  in.sampling.temperature = 0.0f;
  return in;
}

struct Collected {
  std::vector<TokenId> ids;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  std::string error;
  int64_t num_events = 0;
};

Collected Collect(RequestStream* s) {
  Collected c;
  StreamEvent ev;
  while (s->Next(&ev)) {
    ++c.num_events;
    c.ids.insert(c.ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    c.text += ev.text;
    if (ev.finished()) {
      c.finish = ev.finish_reason;
      c.error = ev.error;
    }
  }
  EXPECT_TRUE(s->finished());
  return c;
}

class EngineTest : public ::testing::Test {
 protected:
  void Start(EngineOptions o = Options(), int64_t num_blocks = 32) {
    cache_ = MakeCache(num_blocks);
    auto e = Engine::Create(o, Get().model.get(), &cache_, &pool_);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(e).value();
  }
  Collected Run(RequestInput in) {
    auto s = engine_->submit(std::move(in));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return {};
    return Collect(s->get());
  }
  void ExpectAllBlocksBack() {
    const EngineStats st = engine_->wait_until_idle();
    EXPECT_EQ(st.blocks_in_use, 0);
    EXPECT_EQ(st.num_sequences_in_cache, 0);
    EXPECT_EQ(st.num_running + st.num_waiting, 0);
  }
  ThreadPool pool_{1};
  PagedKvCache cache_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineTest, SubmitRejectsWhatCannotRun) {
  Start();
  RequestInput empty = Greedy(4, 0);
  EXPECT_FALSE(engine_->submit(empty).ok());
  EXPECT_FALSE(engine_->submit(Greedy(0)).ok());
  EXPECT_FALSE(engine_->submit(Greedy(4, kMaxModelLen)).ok());
  RequestInput bad_token = Greedy(4);
  bad_token.prompt_ids[0] = static_cast<TokenId>(Get().model->config().vocab_size);
  EXPECT_FALSE(engine_->submit(bad_token).ok());
  RequestInput bad_sampling = Greedy(4);
  bad_sampling.sampling.top_p = 2.0f;
  EXPECT_FALSE(engine_->submit(bad_sampling).ok());
  ExpectAllBlocksBack();
}

TEST_F(EngineTest, MaxTokensAndMaxModelLen) {
  Start();
  Collected a = Run(Greedy(5));
  EXPECT_EQ(a.ids.size(), 5u);
  EXPECT_EQ(a.finish, FinishReason::kLength);
  // Clipped at max_model_len: prompt 120 + 8 tokens.
  Collected b = Run(Greedy(100, 120));
  EXPECT_EQ(b.ids.size(), 8u);
  EXPECT_EQ(b.finish, FinishReason::kLength);
  ExpectAllBlocksBack();
}

TEST_F(EngineTest, LogprobsComeWithEachTokenAndDoNotChangeTheTokens) {
  Start();
  Collected plain = Run(Greedy(6));
  RequestInput in = Greedy(6);
  in.logprobs = 3;
  auto s = engine_->submit(in);
  ASSERT_TRUE(s.ok());
  std::vector<TokenId> ids;
  StreamEvent ev;
  while ((*s)->Next(&ev)) {
    ASSERT_EQ(ev.logprobs.size(), ev.token_ids.size());
    for (size_t i = 0; i < ev.token_ids.size(); ++i) {
      const SampledLogprobs& lp = ev.logprobs[i];
      EXPECT_EQ(lp.sampled.token, ev.token_ids[i]);
      EXPECT_LE(lp.sampled.logprob, 0.0f);
      ASSERT_EQ(lp.top.size(), 3u);
      // Greedy: the sampled token is the most likely one.
      EXPECT_EQ(lp.rank, 1);
      EXPECT_EQ(lp.top[0].token, ev.token_ids[i]);
      EXPECT_GE(lp.top[0].logprob, lp.top[1].logprob);
      EXPECT_GE(lp.top[1].logprob, lp.top[2].logprob);
    }
    ids.insert(ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.finished()) {
      EXPECT_NE(ev.first_scheduled_time, EngineClock::time_point{});
    }
  }
  EXPECT_EQ(ids, plain.ids);
  in.logprobs = kMaxLogprobs + 1;
  EXPECT_FALSE(engine_->submit(in).ok());
  ExpectAllBlocksBack();
}

TEST_F(EngineTest, PromptLogprobsStreamForEchoAndScoring) {
  // A greedy token t after prompt P, with its logprob x; then P + [t] scored: its last prompt
  // logprob is t's, x again. The scoring request (max_tokens 0) samples nothing.
  Start();
  RequestInput gen = Greedy(1, 20);
  gen.logprobs = 0;
  auto g = engine_->submit(gen);
  ASSERT_TRUE(g.ok());
  StreamEvent ev;
  TokenId t = kNoToken;
  float x = 0.0f;
  while ((*g)->Next(&ev)) {
    if (!ev.token_ids.empty()) {
      t = ev.token_ids[0];
      x = ev.logprobs[0].sampled.logprob;
    }
  }
  ASSERT_NE(t, kNoToken);
  RequestInput score = Greedy(0, 20);
  score.prompt_ids.push_back(t);
  score.prompt_logits_start = 0;
  score.logprobs = 2;
  auto s = engine_->submit(score);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<SampledLogprobs> prompt_lps;
  int64_t next_position = 1;
  while ((*s)->Next(&ev)) {
    EXPECT_TRUE(ev.token_ids.empty());
    if (!ev.prompt_logprobs.empty()) {
      EXPECT_EQ(ev.prompt_logprobs_first, next_position);
      next_position += static_cast<int64_t>(ev.prompt_logprobs.size());
    }
    prompt_lps.insert(prompt_lps.end(), ev.prompt_logprobs.begin(), ev.prompt_logprobs.end());
    if (ev.finished()) {
      EXPECT_EQ(ev.finish_reason, FinishReason::kLength);
    }
  }
  ASSERT_EQ(prompt_lps.size(), score.prompt_ids.size() - 1);
  for (size_t p = 0; p < prompt_lps.size(); ++p) {
    EXPECT_EQ(prompt_lps[p].sampled.token, score.prompt_ids[p + 1]);
    EXPECT_LE(prompt_lps[p].sampled.logprob, 0.0f);
    EXPECT_EQ(prompt_lps[p].top.size(), 2u);
  }
  EXPECT_EQ(prompt_lps.back().rank, 1);  // t was the greedy choice
  EXPECT_NEAR(prompt_lps.back().sampled.logprob, x, 1e-4f);
  ExpectAllBlocksBack();
}

TEST_F(EngineTest, StopTokenIdEndsAndIsKept) {
  Start();
  Collected full = Run(Greedy(12));
  ASSERT_EQ(full.ids.size(), 12u);
  RequestInput in = Greedy(12);
  in.stop_token_ids = {full.ids[4]};
  Collected stopped = Run(in);
  size_t first = 0;
  while (full.ids[first] != full.ids[4]) ++first;
  EXPECT_EQ(stopped.finish, FinishReason::kStop);
  EXPECT_EQ(stopped.ids, std::vector<TokenId>(full.ids.begin(), full.ids.begin() + first + 1));
  ExpectAllBlocksBack();
}

TEST_F(EngineTest, StopStringTrimsTextAndEnds) {
  Start();
  Collected full = Run(Greedy(30));
  ASSERT_GE(full.text.size(), 6u) << "the model's text is too short for this test";
  const std::string stop = full.text.substr(full.text.size() / 2, 2);
  const size_t at = full.text.find(stop);
  RequestInput in = Greedy(30);
  in.stop = {stop, "this string never appears \x01"};
  Collected stopped = Run(in);
  EXPECT_EQ(stopped.finish, FinishReason::kStop);
  EXPECT_EQ(stopped.text, full.text.substr(0, at));
  EXPECT_LE(stopped.ids.size(), full.ids.size());
  EXPECT_EQ(stopped.ids,
            std::vector<TokenId>(full.ids.begin(), full.ids.begin() + stopped.ids.size()));
  ExpectAllBlocksBack();
}

TEST_F(EngineTest, TextWithoutStopStringsEqualsHeldBackText) {
  Start();
  Collected a = Run(Greedy(20));
  RequestInput in = Greedy(20);
  in.stop = {"\x01\x02\x03 never"};
  Collected b = Run(in);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(b.finish, FinishReason::kLength);
}

TEST_F(EngineTest, NoTokenizerMeansNoText) {
  Start(Options(false));
  Collected a = Run(Greedy(4));
  EXPECT_EQ(a.ids.size(), 4u);
  EXPECT_TRUE(a.text.empty());
}

TEST_F(EngineTest, AbortsByCallByDroppingAndByDestroyingTheEngine) {
  Start();
  RequestInput longer = Greedy(kMaxModelLen - 11);
  auto a = engine_->submit(longer);
  ASSERT_TRUE(a.ok());
  engine_->abort((*a)->id());
  Collected ca = Collect(a->get());
  EXPECT_TRUE(ca.finish == FinishReason::kAbort || ca.finish == FinishReason::kLength);
  {
    auto b = engine_->submit(longer);
    ASSERT_TRUE(b.ok());
  }  // dropped: aborted
  ExpectAllBlocksBack();
  EngineClient client(engine_.get());
  auto c = client.submit(longer);
  ASSERT_TRUE(c.ok());
  engine_.reset();  // the stream outlives the engine and ends
  Collected cc = Collect(c->get());
  EXPECT_TRUE(cc.finish == FinishReason::kAbort || cc.finish == FinishReason::kLength);
}

TEST_F(EngineTest, ManyRequestsUnderPressureAllFinishAndStatsAddUp) {
  Start(Options(), 12);  // 192 tokens: fewer than 8 requests of up to ~60 tokens
  std::vector<std::unique_ptr<RequestStream>> streams;
  int64_t expected_tokens = 0;
  for (int i = 0; i < 8; ++i) {
    RequestInput in = Greedy(10 + i * 3, 5 + i * 4);
    expected_tokens += in.max_tokens;
    auto s = engine_->submit(in);
    ASSERT_TRUE(s.ok());
    streams.push_back(std::move(s).value());
  }
  int64_t got = 0;
  for (auto& s : streams) {
    Collected c = Collect(s.get());
    EXPECT_EQ(c.finish, FinishReason::kLength);
    got += static_cast<int64_t>(c.ids.size());
  }
  EXPECT_EQ(got, expected_tokens);
  const EngineStats st = engine_->wait_until_idle();
  EXPECT_EQ(st.num_generated_tokens_total, expected_tokens);
  EXPECT_EQ(st.blocks_in_use, 0);
  EXPECT_GT(st.num_steps, 0);
}

TEST_F(EngineTest, OnStepSeesEveryStepsWorkAndItsSeconds) {
  // What `serve --step-log` records: per step, each scheduled request's KV slots, new tokens
  // and whether it sampled; the work adds up to the prompts and outputs.
  struct Seen {
    int64_t steps = 0, prompt_and_output_tokens = 0, sampled = 0, max_slots = 0;
    bool all_timed = true, aligned = true;
  };
  auto seen = std::make_shared<Seen>();  // the engine thread writes, read after idle
  EngineOptions o = Options();
  o.enable_prefix_caching = false;  // the prompts share a prefix: count every token computed
  o.on_step = [seen](const EngineCoreStep& step, double seconds) {
    ++seen->steps;
    seen->all_timed = seen->all_timed && seconds > 0.0 && seconds < 60.0;
    seen->aligned = seen->aligned && step.work.size() == step.scheduled_ids.size();
    for (const ScheduledWork& w : step.work) {
      seen->prompt_and_output_tokens += w.num_new_tokens;
      seen->sampled += w.samples ? 1 : 0;
      seen->max_slots = std::max(seen->max_slots, w.num_kv_slots);
    }
  };
  Start(o);
  std::vector<std::unique_ptr<RequestStream>> streams;
  for (int i = 0; i < 3; ++i) {
    auto s = engine_->submit(Greedy(6, 20 + 10 * i));
    ASSERT_TRUE(s.ok());
    streams.push_back(std::move(s).value());
  }
  for (auto& s : streams) EXPECT_EQ(Collect(s.get()).ids.size(), 6u);
  const EngineStats st = engine_->wait_until_idle();
  EXPECT_EQ(seen->steps, st.num_steps);
  EXPECT_TRUE(seen->all_timed);
  EXPECT_TRUE(seen->aligned);
  // Prompts 20 + 30 + 40, then 5 more tokens each computed after the first sampled one.
  EXPECT_EQ(seen->prompt_and_output_tokens, 90 + 3 * 5);
  EXPECT_EQ(seen->sampled, 3 * 6);
  EXPECT_EQ(seen->max_slots, 40 + 4);  // the longest request before its last computed token
}

}  // namespace
}  // namespace kvserve

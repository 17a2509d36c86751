#include "runtime/engine_policy.h"

#include <algorithm>
#include <memory>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/synthetic.h"

namespace kvserve {
namespace {

using ::testing::HasSubstr;

TEST(StepTokenBudgetTest, FlagElseVllmDefault) {
  EXPECT_EQ(StepTokenBudget(512, 256, true, 8192), 512);     // given: as is
  EXPECT_EQ(StepTokenBudget(512, 256, false, 8192), 512);    // even below max_model_len
  EXPECT_EQ(StepTokenBudget(0, 256, true, 8192), 2048);      // vLLM's default
  EXPECT_EQ(StepTokenBudget(0, 4096, true, 8192), 4096);     // at least max_num_seqs
  EXPECT_EQ(StepTokenBudget(0, 256, false, 8192), 8192);     // a whole prompt in one step
  EXPECT_EQ(StepTokenBudget(0, 256, false, 1024), 2048);
}

TEST(ResolveSchedulerConfigTest, FillsTheConfigFromTheFlags) {
  SchedulerFlags f;
  f.max_num_seqs = 8;
  f.long_prefill_token_threshold = 64;
  f.policy = SchedulingPolicy::kPriority;
  auto c = ResolveSchedulerConfig(f, 4096);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->max_num_seqs, 8);
  EXPECT_EQ(c->max_num_batched_tokens, 2048);
  EXPECT_EQ(c->max_model_len, 4096);
  EXPECT_TRUE(c->enable_chunked_prefill);
  EXPECT_EQ(c->long_prefill_token_threshold, 64);
  EXPECT_EQ(c->policy, SchedulingPolicy::kPriority);

  f.enable_chunked_prefill = false;
  c = ResolveSchedulerConfig(f, 4096);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->enable_chunked_prefill);
  EXPECT_EQ(c->max_num_batched_tokens, 4096);
  // An explicit budget below max_model_len cannot work without chunked prefill.
  f.max_num_batched_tokens = 1024;
  EXPECT_THAT(ResolveSchedulerConfig(f, 4096).status().message(),
              HasSubstr("chunked prefill disabled"));
}

TEST(ResolveSchedulerConfigTest, RejectsFlagsThatCannotWorkNamingThem) {
  struct Case {
    SchedulerFlags flags;
    const char* message;
  };
  const Case cases[] = {
      {{.max_num_seqs = 0}, "--max-num-seqs must be at least 1"},
      {{.max_num_batched_tokens = -1}, "--max-num-batched-tokens must be >= 0"},
      {{.max_num_seqs = 256, .max_num_batched_tokens = 100},
       "--max-num-batched-tokens (100) must be at least --max-num-seqs (256)"},
      {{.long_prefill_token_threshold = -1}, "--long-prefill-token-threshold must be >= 0"},
  };
  for (const Case& c : cases) {
    const Status s = ValidateSchedulerFlags(c.flags);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
    EXPECT_EQ(ResolveSchedulerConfig(c.flags, 2048).status().code(),
              StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(ValidateSchedulerFlags(SchedulerFlags{}).ok());
  EXPECT_FALSE(ResolveSchedulerConfig(SchedulerFlags{}, 1).ok());  // max_model_len < 2
}

TEST(EndOfGenerationIdsTest, EosAndEogIdsPlusBosForLlama2c) {
  SyntheticModelOptions o;
  o.preset = "tiny";
  auto loaded = MakeSyntheticModel(o);
  ASSERT_TRUE(loaded.ok() && loaded->vocab.has_value());
  VocabSpec spec = *loaded->vocab;
  ASSERT_GE(spec.tokens.size(), 8u);
  spec.eog_ids = {5};
  auto tok = Tokenizer::Create(spec);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const int64_t n = static_cast<int64_t>(spec.tokens.size());
  std::vector<TokenId> expected = {spec.eos_id, 5};
  std::sort(expected.begin(), expected.end());
  expected.erase(std::unique(expected.begin(), expected.end()), expected.end());
  EXPECT_EQ(EndOfGenerationIds(**tok, n, /*llama2c=*/false), expected);
  expected.push_back(spec.bos_id);
  std::sort(expected.begin(), expected.end());
  expected.erase(std::unique(expected.begin(), expected.end()), expected.end());
  EXPECT_EQ(EndOfGenerationIds(**tok, n, /*llama2c=*/true), expected);
}

}  // namespace
}  // namespace kvserve

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

TEST(ResolveEngineConfigTest, SizingBudgetNamespaceAndStopIds) {
  SyntheticModelOptions o;
  o.preset = "tiny";
  auto loaded = MakeSyntheticModel(o);
  ASSERT_TRUE(loaded.ok());
  auto tok = Tokenizer::Create(*loaded->vocab);
  ASSERT_TRUE(tok.ok());
  auto model = LlamaModel::Create(std::move(loaded).value());
  ASSERT_TRUE(model.ok());
  const int64_t context = (*model)->config().max_seq_len;

  EngineConfigOptions eo;
  eo.scheduler.max_num_seqs = 8;
  eo.default_num_sequences = 32;
  auto c = ResolveEngineConfig(eo, **model, tok->get());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->core.scheduler.max_model_len, context);  // the model's context by default
  EXPECT_EQ(c->core.scheduler.max_num_batched_tokens, 2048);
  EXPECT_EQ(c->kv.max_num_batched_tokens, 2048);      // the workspace's rows
  EXPECT_EQ(c->kv.default_num_sequences, 8);          // capped by --max-num-seqs
  EXPECT_EQ(c->core.scheduler.model_namespace, (*model)->config().name);
  EXPECT_EQ(c->core.scheduler.eos_token_ids,
            EndOfGenerationIds(**tok, (*model)->config().vocab_size, false));
  EXPECT_TRUE(c->core.enable_prefix_caching);

  // Single-prompt generate: one sequence, the prompt in one pass, --max-model-len honoured.
  eo.kv.max_model_len = 100;
  eo.scheduler.max_num_seqs = 1;
  eo.scheduler.enable_prefix_caching = false;
  eo.prompt_in_one_pass = true;
  c = ResolveEngineConfig(eo, **model, nullptr);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->core.scheduler.max_model_len, 100);
  EXPECT_EQ(c->core.scheduler.max_num_batched_tokens, 100);
  EXPECT_EQ(c->kv.default_num_sequences, 1);
  EXPECT_TRUE(c->core.scheduler.eos_token_ids.empty());  // no tokenizer: no stop ids
  EXPECT_FALSE(c->core.enable_prefix_caching);
  eo.scheduler.max_num_batched_tokens = 16;  // a flag wins over the one-pass default
  c = ResolveEngineConfig(eo, **model, nullptr);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->core.scheduler.max_num_batched_tokens, 16);

  eo.scheduler.max_num_seqs = 0;
  c = ResolveEngineConfig(eo, **model, nullptr);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("--max-num-seqs"));
}

}  // namespace
}  // namespace kvserve

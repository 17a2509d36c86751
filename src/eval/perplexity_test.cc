// The eval library: the scoring arithmetic (KL divergence, percentiles, summaries) and
// RunPerplexity through the engine core on the built-in random model (no assets needed).
#include "eval/perplexity.h"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "model/synthetic.h"

namespace kvserve::eval {
namespace {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Scoring arithmetic.

TEST(ScoreTokenTest, IdenticalLogitsHaveZeroKld) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -3.0f};
  const TokenScore s = ScoreToken(logits.data(), logits.data(), 4, 1);
  EXPECT_EQ(s.kld, 0.0);
  EXPECT_TRUE(s.same_top1);
  EXPECT_EQ(s.delta_p, 0.0);
  double z = 0.0;
  for (float x : logits) z += std::exp(static_cast<double>(x));
  EXPECT_NEAR(s.nll, -(2.0 - std::log(z)), 1e-12);
  EXPECT_DOUBLE_EQ(s.nll, s.base_nll);
}

TEST(ScoreTokenTest, KldMatchesHandComputation) {
  // base p = (0.5, 0.5) from equal logits; test p = (0.8, 0.2) from ln 4 apart.
  const std::vector<float> base = {0.0f, 0.0f};
  const std::vector<float> test = {static_cast<float>(std::log(4.0)), 0.0f};
  const TokenScore s = ScoreToken(test.data(), base.data(), 2, 1);
  const double want = 0.5 * std::log(0.5 / 0.8) + 0.5 * std::log(0.5 / 0.2);
  EXPECT_NEAR(s.kld, want, 1e-7);
  EXPECT_NEAR(s.nll, -std::log(0.2), 1e-7);
  EXPECT_NEAR(s.base_nll, std::log(2.0), 1e-12);
  EXPECT_NEAR(s.delta_p, 0.2 - 0.5, 1e-7);
  EXPECT_TRUE(s.same_top1);  // base ties -> lowest id 0; test argmax 0
  // Without a base only nll is set.
  const TokenScore t = ScoreToken(test.data(), nullptr, 2, 0);
  EXPECT_NEAR(t.nll, -std::log(0.8), 1e-7);
  EXPECT_EQ(t.kld, 0.0);
}

TEST(ScoreTokenTest, LargeLogitsStayFinite) {
  const std::vector<float> base = {1000.0f, 990.0f, -1000.0f};
  const std::vector<float> test = {990.0f, 1000.0f, -1000.0f};
  const TokenScore s = ScoreToken(test.data(), base.data(), 3, 2);
  EXPECT_TRUE(std::isfinite(s.kld));
  EXPECT_GT(s.kld, 9.0);  // ~10 nats: the two modes swapped
  EXPECT_FALSE(s.same_top1);
  EXPECT_NEAR(s.nll, 2000.0, 1e-3);  // token 2 sits 2000 below the top logit
}

TEST(SummarizeScoresTest, PerplexityAndKldFigures) {
  std::vector<TokenScore> scores(4);
  const double nll[] = {1.0, 2.0, 3.0, 2.0};
  const double kld[] = {0.0, 0.1, 0.2, 0.3};
  for (int i = 0; i < 4; ++i) {
    scores[i].nll = nll[i];
    scores[i].base_nll = nll[i] - 0.5;
    scores[i].kld = kld[i];
    scores[i].same_top1 = i != 3;
    scores[i].delta_p = i % 2 == 0 ? 0.1 : -0.1;
  }
  const PerplexityResult r = SummarizeScores(scores, /*has_base=*/true);
  EXPECT_EQ(r.num_scored_tokens, 4);
  EXPECT_DOUBLE_EQ(r.mean_nll, 2.0);
  EXPECT_DOUBLE_EQ(r.perplexity, std::exp(2.0));
  ASSERT_TRUE(r.kld.has_value());
  EXPECT_NEAR(r.kld->base_perplexity, std::exp(1.5), 1e-12);
  EXPECT_NEAR(r.kld->ln_ppl_ratio, 0.5, 1e-12);
  EXPECT_NEAR(r.kld->ln_ppl_ratio_stderr, 0.0, 1e-12);
  EXPECT_NEAR(r.kld->mean_kld, 0.15, 1e-12);
  EXPECT_NEAR(r.kld->median_kld, 0.15, 1e-12);
  EXPECT_NEAR(r.kld->max_kld, 0.3, 1e-12);
  EXPECT_NEAR(r.kld->p99_kld, 0.297, 1e-12);
  EXPECT_DOUBLE_EQ(r.kld->top1_agreement, 0.75);
  EXPECT_NEAR(r.kld->mean_delta_p, 0.0, 1e-12);
  EXPECT_NEAR(r.kld->rms_delta_p, 0.1, 1e-12);
  EXPECT_FALSE(SummarizeScores(scores, false).kld.has_value());
}

// ---------------------------------------------------------------------------------------------
// RunPerplexity in-process on the built-in random model (no assets needed).

PagedKvCache WindowCache(LlamaModel& model, const std::string& dtype, int64_t ctx) {
  KvCacheConfig config;
  config.dtype = dtype;
  config.max_model_len = ctx;
  auto d = ParseKvCacheDtype(dtype, DType::kF32);
  KV_CHECK(d.ok());
  const KvCacheSpec spec = model.kv_spec(*d, config.block_size);
  config.memory_bytes = spec.fixed_scale_bytes() + spec.blocks_for_tokens(ctx) * spec.bytes_per_block();
  auto cache = CreatePagedKvCache(model, nullptr, config, nullptr);
  KV_CHECK(cache.ok()) << cache.status().ToString();
  return std::move(cache).value();
}

TEST(RunPerplexityTest, SameCacheDtypeGivesZeroKldAndWindowsAreCounted) {
  auto model = LlamaModel::Create(MakeBuiltinDefaultModel());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const int64_t ctx = 32;
  const std::vector<TokenId> tokens = SyntheticTokenIds(3 * ctx + 5, (*model)->config().vocab_size);
  PagedKvCache test = WindowCache(**model, "f32", ctx);
  PagedKvCache base = WindowCache(**model, "f32", ctx);
  ThreadPool pool(2);
  PerplexityOptions o;
  o.ctx_tokens = ctx;
  o.batch_tokens = 7;  // passes that end before, inside and after the scored half
  o.bos_id = 1;
  int64_t calls = 0;
  auto r = RunPerplexity(**model, tokens, o, &test, &base, &pool,
                         [&](int64_t done, int64_t total, const PerplexityResult&) {
                           ++calls;
                           EXPECT_EQ(done, calls);
                           EXPECT_EQ(total, 3);
                         });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(r->num_windows, 3);
  EXPECT_EQ(r->num_scored_tokens, 3 * (ctx - 1 - ctx / 2));
  EXPECT_EQ(r->batch_tokens, 7);
  EXPECT_TRUE(std::isfinite(r->perplexity));
  EXPECT_GT(r->perplexity, 1.0);
  ASSERT_TRUE(r->kld.has_value());
  EXPECT_NEAR(r->kld->mean_kld, 0.0, 1e-12);
  EXPECT_NEAR(r->kld->max_kld, 0.0, 1e-12);
  EXPECT_EQ(r->kld->top1_agreement, 1.0);
  EXPECT_NEAR(r->kld->base_perplexity, r->perplexity, 1e-9 * r->perplexity);
  // Every block came back after every window: RunWindow KV_CHECKs it.

  // The batch size does not change f32 results beyond float rounding.
  o.batch_tokens = 0;
  o.max_windows = 1;
  auto one = RunPerplexity(**model, tokens, o, &test, nullptr, nullptr);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->num_windows, 1);
  EXPECT_EQ(one->batch_tokens, ctx);
  EXPECT_FALSE(one->kld.has_value());
}

TEST(RunPerplexityTest, BadInputsAreStatusErrors) {
  auto model = LlamaModel::Create(MakeBuiltinDefaultModel());
  ASSERT_TRUE(model.ok());
  const int64_t ctx = 16;
  PagedKvCache kv = WindowCache(**model, "f32", ctx);
  const int64_t V = (*model)->config().vocab_size;
  PerplexityOptions o;
  o.ctx_tokens = ctx;
  // Too short for one window.
  auto r = RunPerplexity(**model, SyntheticTokenIds(ctx - 1, V), o, &kv, nullptr, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("fewer than one window"), std::string::npos);
  // A window longer than the cache's max model length.
  o.ctx_tokens = 2 * ctx;
  EXPECT_FALSE(RunPerplexity(**model, SyntheticTokenIds(4 * ctx, V), o, &kv, nullptr, nullptr).ok());
  // ctx < 3.
  o.ctx_tokens = 2;
  EXPECT_FALSE(RunPerplexity(**model, SyntheticTokenIds(4 * ctx, V), o, &kv, nullptr, nullptr).ok());
  // A token outside the vocabulary.
  o.ctx_tokens = ctx;
  std::vector<TokenId> bad = SyntheticTokenIds(2 * ctx, V);
  bad[5] = static_cast<TokenId>(V);
  r = RunPerplexity(**model, bad, o, &kv, nullptr, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("outside the model's vocabulary"), std::string::npos);
}

TEST(FormatPerplexityJsonTest, KldFieldsAreNullWithoutABase) {
  PerplexityReport report;
  report.result.perplexity = 3.5;
  report.kv_cache_dtype = "f16";
  json j = json::parse(FormatPerplexityJson(report));
  EXPECT_EQ(j["perplexity"], 3.5);
  EXPECT_EQ(j["kv_cache_dtype"], "f16");
  for (const char* key : {"mean_kld", "p99_kld", "top1_agreement", "base_perplexity"}) {
    ASSERT_TRUE(j.contains(key)) << key;
    EXPECT_TRUE(j[key].is_null()) << key;
  }
}

}  // namespace
}  // namespace kvserve::eval

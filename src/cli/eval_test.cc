// `kvserve eval perplexity`: the scoring arithmetic (KL divergence, percentiles, summaries),
// RunPerplexity in-process on the built-in random model, and the binary end to end on
// stories260K over a slice of the TinyStories validation text (skipped when ../shared/assets is
// absent). Windows of 128 tokens keep every case to a fraction of a second.
#include "cli/eval.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/testing/test_dependency.h"
#include "cli/cli_test_util.h"
#include "model/synthetic.h"

namespace kvserve::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::Ran;
using testing::ReadFile;
using testing::RunKv;
using testing::TempDir;

const std::string kAssets = KVSERVE_ASSETS_DIR;
const std::string kStories = kAssets + "/models/stories260K/stories260K.bin";
const std::string kValidation = kAssets + "/text/tinystories_validation_head.txt";

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

TEST(SortedPercentileTest, InterpolatesLikeLlamaCpp) {
  const std::vector<double> v = {1.0, 2.0, 3.0, 4.0, 5.0};
  EXPECT_DOUBLE_EQ(SortedPercentile(v, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(SortedPercentile(v, 0.5), 3.0);
  EXPECT_DOUBLE_EQ(SortedPercentile(v, 0.99), 4.96);
  EXPECT_DOUBLE_EQ(SortedPercentile(v, 1.0), 5.0);
  EXPECT_DOUBLE_EQ(SortedPercentile({7.0}, 0.99), 7.0);
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
  // Every block came back.
  EXPECT_EQ(test.blocks->num_in_use(), 0);
  EXPECT_EQ(base.blocks->num_in_use(), 0);

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
  EXPECT_FALSE(RunPerplexity(**model, bad, o, &kv, nullptr, nullptr).ok());
  EXPECT_EQ(kv.blocks->num_in_use(), 0);
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

// ---------------------------------------------------------------------------------------------
// The binary, end to end.

bool HasAssets() { return fs::exists(kStories) && fs::exists(kValidation); }

// The first `num_bytes` of the validation text, cut at a line end (about 4 windows of 128
// tokens for 3000 bytes).
class TextSlice {
 public:
  explicit TextSlice(size_t num_bytes) {
    std::string text = ReadFile(kValidation).substr(0, num_bytes);
    text = text.substr(0, text.rfind('\n') + 1);
    std::ofstream(tmp_.file("slice.txt"), std::ios::binary) << text;
  }
  std::string path() const { return tmp_.file("slice.txt"); }

 private:
  TempDir tmp_;
};

json RunEvalJson(const std::vector<std::string>& extra, const std::string& text) {
  std::vector<std::string> args = {"eval", "perplexity", "--model", kStories, "--text-file", text,
                                   "--ctx", "128", "--threads", "2", "--format", "json"};
  args.insert(args.end(), extra.begin(), extra.end());
  Ran r = RunKv(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return json();
  return json::parse(r.out);  // exactly one object: trailing output fails the parse
}

TEST(EvalPerplexityCliTest, StoriesPerplexityIsPlausible) {
  KVSERVE_SKIP_IF_ABSENT(HasAssets(), kStories << " and " << kValidation);
  TextSlice slice(3000);
  json j = RunEvalJson({}, slice.path());
  ASSERT_TRUE(j.is_object());
  for (const char* key : {"perplexity", "perplexity_stderr", "mean_kld", "p99_kld",
                          "top1_agreement", "num_windows", "num_scored_tokens", "ctx",
                          "kv_cache_dtype", "num_text_tokens", "batch_size"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["ctx"], 128);
  EXPECT_EQ(j["kv_cache_dtype"], "f32");
  EXPECT_GE(j["num_windows"].get<int>(), 3);
  EXPECT_EQ(j["num_scored_tokens"].get<int>(), j["num_windows"].get<int>() * 63);
  EXPECT_TRUE(j["mean_kld"].is_null());
  const double ppl = j["perplexity"].get<double>();
  // The model card's validation loss is 1.2968 (PPL 3.66) at full context; 64-127 tokens of
  // context on a few stories land near it.
  EXPECT_GT(ppl, 2.0);
  EXPECT_LT(ppl, 10.0);
}

TEST(EvalPerplexityCliTest, F32AgainstF32IsIdentical) {
  KVSERVE_SKIP_IF_ABSENT(HasAssets(), kStories << " and " << kValidation);
  TextSlice slice(3000);
  json j = RunEvalJson({"--kv-cache-dtype", "f32", "--kl-divergence"}, slice.path());
  ASSERT_TRUE(j.is_object());
  EXPECT_NEAR(j["mean_kld"].get<double>(), 0.0, 1e-12);
  EXPECT_NEAR(j["p99_kld"].get<double>(), 0.0, 1e-12);
  EXPECT_NEAR(j["max_kld"].get<double>(), 0.0, 1e-12);
  EXPECT_EQ(j["top1_agreement"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j["base_perplexity"].get<double>(), j["perplexity"].get<double>());
  EXPECT_EQ(j["base_kv_cache_dtype"], "f32");
}

TEST(EvalPerplexityCliTest, QuantizedKvStaysCloseToF32) {
  KVSERVE_SKIP_IF_ABSENT(HasAssets(), kStories << " and " << kValidation);
  TextSlice slice(3000);
  // f16 in passes of 32 tokens, so that most context is read back from the f16 cache.
  json f16 = RunEvalJson({"--kv-cache-dtype", "f16", "--kl-divergence", "--batch-size", "32"},
                         slice.path());
  ASSERT_TRUE(f16.is_object());
  EXPECT_EQ(f16["kv_cache_dtype"], "f16");
  EXPECT_EQ(f16["batch_size"], 32);
  const double kld = f16["mean_kld"].get<double>();
  EXPECT_GE(kld, 0.0);
  EXPECT_LT(kld, 1e-3);
  EXPECT_GT(f16["top1_agreement"].get<double>(), 0.97);
  EXPECT_LE(f16["p99_kld"].get<double>(), f16["max_kld"].get<double>());
  EXPECT_LT(std::abs(f16["ln_ppl_ratio"].get<double>()), 0.01);
  // int8 loses more than f16 but stays usable.
  json i8 = RunEvalJson({"--kv-cache-dtype", "int8", "--kl-divergence"}, slice.path());
  ASSERT_TRUE(i8.is_object());
  EXPECT_LT(i8["mean_kld"].get<double>(), 0.05);
  EXPECT_GT(i8["top1_agreement"].get<double>(), 0.9);
}

TEST(EvalPerplexityCliTest, TextSummaryAndBanners) {
  KVSERVE_SKIP_IF_ABSENT(HasAssets(), kStories << " and " << kValidation);
  TextSlice slice(3000);
  Ran r = RunKv({"eval", "perplexity", "-m", kStories, "-f", slice.path(), "--ctx", "128",
                 "--kl-divergence", "--kv-cache-dtype", "bf16", "--threads", "1",
                 "--max-windows", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* want : {"perplexity:", "mean KLD:", "top-1 agreement:", "bf16"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << " in:\n" << r.out;
  }
  EXPECT_NE(r.err.find("KV cache:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("window 2/2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("one --ctx window (128 tokens)"), std::string::npos) << r.err;
}

TEST(EvalPerplexityCliTest, CtxIsCappedByTheModelContext) {
  KVSERVE_SKIP_IF_ABSENT(HasAssets(), kStories << " and " << kValidation);
  TextSlice slice(6000);
  Ran r = RunKv({"eval", "perplexity", "-m", kStories, "-f", slice.path(), "--ctx", "4096",
                 "--max-windows", "1", "--format", "json", "--threads", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["ctx"], 512);  // stories260K's seq_len
  EXPECT_NE(r.err.find("exceeds the model's context"), std::string::npos) << r.err;
}

TEST(EvalPerplexityCliTest, BadInputsAreErrorsNotCrashes) {
  TempDir tmp;
  std::ofstream(tmp.file("empty.txt")) << "  \n";
  std::ofstream(tmp.file("short.txt")) << "Once upon a time there was a cat.\n";
  std::ofstream(tmp.file("garbage.gguf")) << "GGUF this is not a model";
  const std::string model = HasAssets() ? kStories : tmp.file("garbage.gguf");
  const std::string shrt = tmp.file("short.txt");
  std::vector<std::vector<std::string>> cases = {
      {"eval", "perplexity", "-m", model, "-f", "/nonexistent/text.txt"},
      {"eval", "perplexity", "-m", model, "-f", tmp.file("empty.txt")},
      {"eval", "perplexity", "-m", model, "-f", "/tmp"},
      {"eval", "perplexity", "-m", model, "-f", shrt, "--ctx", "2"},
      {"eval", "perplexity", "-m", model, "-f", shrt, "--ctx", "-5"},
      {"eval", "perplexity", "-m", model, "-f", shrt, "--batch-size", "-1"},
      {"eval", "perplexity", "-m", "/nonexistent/model.gguf", "-f", shrt},
      {"eval", "perplexity", "-m", tmp.file("garbage.gguf"), "-f", shrt},
      {"eval", "perplexity", "-m", model, "-f", shrt, "--kv-cache-dtype", "q4"},
      {"eval", "perplexity", "-m", model, "-f", shrt, "--format", "xml"},
      {"eval", "perplexity", "-f", shrt},  // no --model
      {"eval"},                            // no subcommand
  };
  if (HasAssets()) {
    // Too short for one window of 128 tokens.
    cases.push_back({"eval", "perplexity", "-m", model, "-f", shrt, "--ctx", "128"});
  }
  for (const std::vector<std::string>& args : cases) {
    Ran r = RunKv(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_NE(r.exit_code, 0) << joined;
    EXPECT_LT(r.exit_code, 128) << "crashed: " << joined << "\n" << r.err;
    EXPECT_NE(r.err.find("error: "), std::string::npos) << joined << "-> " << r.err;
  }
  if (HasAssets()) {
    Ran r = RunKv({"eval", "perplexity", "-m", model, "-f", shrt, "--ctx", "128"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("fewer than one window"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace kvserve::cli

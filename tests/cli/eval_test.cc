// `kvserve eval perplexity` end to end on stories260K over a slice of the TinyStories
// validation text (skipped when ../shared/assets is absent). Windows of 128 tokens keep every
// case to a fraction of a second. The scoring itself is tested in src/eval/perplexity_test.cc.

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
#include "cli_test_util.h"

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

// Past the trained context only StreamingLLM runs (positions within its window); the default
// --ctx is 512 or the model's context.
TEST(EvalPerplexityCliTest, CtxPastTheModelContextNeedsStreaming) {
  KVSERVE_SKIP_IF_ABSENT(HasAssets(), kStories << " and " << kValidation);
  TextSlice slice(12000);
  Ran r = RunKv({"eval", "perplexity", "-m", kStories, "-f", slice.path(), "--ctx", "1024",
                 "--max-windows", "1", "--format", "json", "--threads", "2"});
  EXPECT_NE(r.exit_code, 0);  // without eviction
  EXPECT_NE(r.err.find("exceeds the model's trained context (512 tokens)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("--kv-eviction streaming"), std::string::npos) << r.err;
  r = RunKv({"eval", "perplexity", "-m", kStories, "-f", slice.path(), "--ctx", "1024",
             "--max-windows", "1", "--format", "json", "--threads", "2", "--kv-eviction",
             "streaming", "--kv-budget", "64"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["ctx"], 1024);
  EXPECT_EQ(j["kv_eviction"], "streaming");
  EXPECT_EQ(j["kv_budget"], 64);
  EXPECT_LE(j["mean_kv_tokens_kept"].get<double>(), 64 + 16);
  EXPECT_GT(j["perplexity"].get<double>(), 1.0);
  EXPECT_LT(j["perplexity"].get<double>(), 20.0);
  r = RunKv({"eval", "perplexity", "-m", kStories, "-f", slice.path(), "--max-windows", "1",
             "--format", "json", "--threads", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["ctx"], 512);
}

// Every method through eval: the JSON names it and its budget; the compressed context keeps
// the run close to the full cache (KLD small, not zero) and the KV attended near the budget.
TEST(EvalPerplexityCliTest, KvEvictionMethodsAgainstTheFullCache) {
  KVSERVE_SKIP_IF_ABSENT(HasAssets(), kStories << " and " << kValidation);
  TextSlice slice(6000);
  const json full = RunEvalJson({"--kl-divergence"}, slice.path());
  ASSERT_TRUE(full.is_object());
  EXPECT_EQ(full["kv_eviction"], "none");
  EXPECT_TRUE(full["kv_budget"].is_null());
  for (const char* method : {"streaming", "h2o", "snapkv", "pyramidkv"}) {
    // SnapKV and PyramidKV keep their observation window within the budget.
    const json j = RunEvalJson({"--kl-divergence", "--kv-eviction", method, "--kv-budget", "32",
                                "--kv-observation-window", "8"},
                               slice.path());
    ASSERT_TRUE(j.is_object()) << method;
    EXPECT_EQ(j["kv_eviction"], method);
    EXPECT_EQ(j["kv_budget"], 32);
    EXPECT_GT(j["mean_kld"].get<double>(), 0.0) << method << ": nothing was evicted";
    EXPECT_LT(j["mean_kld"].get<double>(), 1.0) << method;
    EXPECT_LT(j["mean_kv_tokens_kept"].get<double>(),
              full["mean_kv_tokens_kept"].get<double>()) << method;
    EXPECT_NEAR(j["base_perplexity"].get<double>(), full["perplexity"].get<double>(), 1e-9);
  }
  Ran r = RunKv({"eval", "perplexity", "-m", kStories, "-f", slice.path(), "--ctx", "128",
                 "--kv-eviction", "snapkv", "--kv-budget", "2"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--kv-budget"), std::string::npos) << r.err;
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

// End-to-end tests of the `kvserve` binary (run as a child process) and in-process tests of the
// generation loop. Tests on real models skip when ../shared/assets is absent.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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
const std::string kStoriesDir = kAssets + "/models/stories260K";

bool HasStories() { return fs::exists(kStoriesDir + "/stories260K.bin"); }

json StoriesReference() { return json::parse(ReadFile(kStoriesDir + "/greedy_reference.json")); }

// ---------------------------------------------------------------------------------------------
// Help and argument errors.

TEST(KvserveCliTest, HelpListsSubcommands) {
  Ran r = RunKv({"--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* sub : {"generate", "tokenize", "mkmodel", "convert"}) {
    EXPECT_NE(r.out.find(sub), std::string::npos) << sub << " missing from:\n" << r.out;
  }
}

TEST(KvserveCliTest, EachSubcommandHasHelp) {
  for (const char* sub : {"generate", "tokenize", "mkmodel", "convert"}) {
    Ran r = RunKv({sub, "--help"});
    EXPECT_EQ(r.exit_code, 0) << sub << ": " << r.err;
    EXPECT_NE(r.out.find("--"), std::string::npos) << sub;
  }
  Ran r = RunKv({"generate", "--help"});
  for (const char* opt : {"--model", "--prompt", "--temperature", "--top-k", "--top-p", "--min-p",
                          "--seed", "--threads", "--output-format", "--no-bos"}) {
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
  }
  EXPECT_EQ(r.out.find("--prompt-ids"), std::string::npos) << "hidden option shown";
}

TEST(KvserveCliTest, UsageErrorsSayError) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{},
                                             {"frobnicate"},
                                             {"generate", "--no-such-flag"},
                                             {"generate", "-n", "abc"},
                                             {"generate", "--output-format", "xml"},
                                             {"tokenize", "--text", "a", "--text-file", "b"},
                                             {"mkmodel", "-o", "/tmp/x.gguf"}}) {
    Ran r = RunKv(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_NE(r.exit_code, 0) << joined;
    EXPECT_LT(r.exit_code, 128) << "crashed: " << joined;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << joined << "-> " << r.err;
  }
}

TEST(KvserveCliTest, BadInputsAreErrorsNotCrashes) {
  TempDir tmp;
  std::ofstream(tmp.file("garbage.gguf")) << "GGUF this is not a model";
  std::ofstream(tmp.file("short.bin")) << "xy";
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"generate", "--model", "/nonexistent/model.gguf", "--prompt", "hi"},
           {"generate", "--model", tmp.file("garbage.gguf"), "--prompt", "hi"},
           {"generate", "--model", tmp.file("short.bin"), "--prompt", "hi"},
           {"generate", "--temperature", "-1", "--prompt", "hi"},
           {"generate", "--top-p", "0", "--prompt", "hi"},
           {"generate", "--prompt-ids", "1 2 99999999"},
           {"generate", "--random-prompt-tokens", "100000", "-n", "1"},  // beyond the context
           {"generate", "--no-bos", "--prompt", ""},                      // nothing to run
           {"generate", "--prompt", "hi", "--max-num-seqs", "0"},         // refused, not ignored
           {"generate", "--prompt", "hi", "--max-num-batched-tokens", "-1"},
           {"tokenize", "--model", "/nonexistent", "--text", "a"},
           {"tokenize", "--model", tmp.file("garbage.gguf"), "--text", "a"},
           {"convert", "--model", "/nonexistent", "-o", tmp.file("out.gguf")},
           {"mkmodel", "--preset", "no-such-preset", "-o", tmp.file("x.gguf")},
           {"mkmodel", "--preset", "tiny", "--dtype", "int3", "-o", tmp.file("x.gguf")},
       }) {
    Ran r = RunKv(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_NE(r.exit_code, 0) << joined;
    EXPECT_LT(r.exit_code, 128) << "crashed: " << joined << "\n" << r.err;
    EXPECT_NE(r.err.find("error: "), std::string::npos) << joined << "-> " << r.err;
  }
}

// ---------------------------------------------------------------------------------------------
// generate on the built-in model.

TEST(KvserveCliTest, BuiltinModelJsonAndBanner) {
  Ran r = RunKv({"generate", "--prompt", "Once upon a time", "-n", "8", "--seed", "3",
                 "--threads", "2", "--output-format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("RANDOM"), std::string::npos) << r.err;
  json j = json::parse(r.out);  // exactly one object: parse fails on trailing garbage
  for (const char* key :
       {"prompt_token_ids", "output_token_ids", "text", "finish_reason", "num_prompt_tokens",
        "num_output_tokens", "prefill_tokens_per_s", "decode_tokens_per_s", "prefill_seconds",
        "decode_seconds", "model", "threads"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["threads"], 2);
  EXPECT_EQ(j["num_prompt_tokens"], j["prompt_token_ids"].size());
  EXPECT_EQ(j["num_output_tokens"], j["output_token_ids"].size());
  EXPECT_LE(j["num_output_tokens"].get<int>(), 8);
  EXPECT_GE(j["num_output_tokens"].get<int>(), 1);
  if (j["finish_reason"] == "length") {
    EXPECT_EQ(j["num_output_tokens"], 8);
  }
}

TEST(KvserveCliTest, SameSeedSameTokensDifferentSeedDifferentTokens) {
  auto ids = [](const std::string& seed) {
    Ran r = RunKv({"generate", "--prompt", "hello", "-n", "24", "--seed", seed, "--ignore-eos",
                   "--temperature", "1.5", "--threads", "1", "--output-format", "json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out)["output_token_ids"].get<std::vector<int>>();
  };
  const auto a = ids("7"), b = ids("7"), c = ids("8");
  EXPECT_EQ(a.size(), 24u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

// --warmup runs the prompt untimed on an engine core of its own first: the timed run starts
// from an empty prefix cache (its whole prompt is prefilled again) and samples the same tokens.
TEST(KvserveCliTest, WarmupChangesNoTokens) {
  auto run = [](const std::string& warmup) {
    Ran r = RunKv({"generate", "--random-prompt-tokens", "40", "-n", "12", "--seed", "5",
                   "--ignore-eos", "--temperature", "1.2", "--threads", "2", "--warmup", warmup,
                   "--output-format", "json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out);
  };
  const json cold = run("0"), warm = run("2");
  EXPECT_EQ(cold["output_token_ids"], warm["output_token_ids"]);
  EXPECT_EQ(warm["num_prompt_tokens"], 40);
  EXPECT_GT(warm["prefill_seconds"].get<double>(), 0.0);
  EXPECT_EQ(warm["num_output_tokens"], 12);
}

TEST(KvserveCliTest, WarmupRefusedWithPromptsFile) {
  Ran r = RunKv({"generate", "--prompts-file", "/dev/null", "--warmup", "1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--warmup"), std::string::npos) << r.err;
}

TEST(KvserveCliTest, TextModeStreamsAndReportsTiming) {
  Ran r = RunKv({"generate", "--prompt", "abc", "-n", "4", "--seed", "1", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("abc", 0), 0u) << "prompt not echoed: " << r.out;
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
}

// ---------------------------------------------------------------------------------------------
// stories260K: greedy output must equal llama2.c run.c's.

void ExpectGreedyMatchesReference(const std::string& model_path, const std::string& tokenizer) {
  json ref = StoriesReference();
  for (const json& c : ref["cases"]) {
    const auto prompt_ids = c["prompt_ids_with_bos"].get<std::vector<int>>();
    const auto after_bos = c["ids_after_bos"].get<std::vector<int>>();
    const int64_t num_generated = static_cast<int64_t>(after_bos.size()) -
                                  static_cast<int64_t>(prompt_ids.size() - 1);
    std::vector<std::string> args = {"generate", "--model", model_path,
                                     "--prompt", c["prompt"].get<std::string>(),
                                     "-n", std::to_string(num_generated),
                                     "--temperature", "0",
                                     "--threads", "1",
                                     "--output-format", "json"};
    if (!tokenizer.empty()) {
      args.push_back("--tokenizer");
      args.push_back(tokenizer);
    }
    Ran r = RunKv(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    json j = json::parse(r.out);
    EXPECT_EQ(j["prompt_token_ids"].get<std::vector<int>>(), prompt_ids) << c["prompt"];
    std::vector<int> want(after_bos.begin() + static_cast<int64_t>(prompt_ids.size() - 1),
                          after_bos.end());
    EXPECT_EQ(j["output_token_ids"].get<std::vector<int>>(), want) << c["prompt"];
    EXPECT_EQ(j["finish_reason"], "length");
  }
}

TEST(KvserveCliTest, Stories260KGreedyMatchesRunC) {
  KVSERVE_SKIP_IF_ABSENT(HasStories(), kStoriesDir << "/stories260K.bin");
  ExpectGreedyMatchesReference(kStoriesDir + "/stories260K.bin", "");
}

// The reference prompts (all but the empty one, which a prompts file cannot hold) batched
// through the engine by --prompts-file: each output starts with the reference tokens (the run
// asks for as many as the longest case needs; greedy continues the same way).
TEST(KvserveCliTest, Stories260KPromptsFileGreedyMatchesRunC) {
  KVSERVE_SKIP_IF_ABSENT(HasStories(), kStoriesDir << "/stories260K.bin");
  json ref = StoriesReference();
  TempDir tmp;
  std::vector<json> cases;
  int64_t max_generated = 0;
  {
    std::ofstream prompts(tmp.file("prompts.txt"));
    for (const json& c : ref["cases"]) {
      if (c["prompt"].get<std::string>().empty()) continue;
      prompts << c["prompt"].get<std::string>() << "\n";
      cases.push_back(c);
      max_generated = std::max<int64_t>(
          max_generated, static_cast<int64_t>(c["ids_after_bos"].size()) -
                             static_cast<int64_t>(c["prompt_ids_with_bos"].size() - 1));
    }
  }
  ASSERT_GE(cases.size(), 2u);
  Ran r = RunKv({"generate", "--model", kStoriesDir + "/stories260K.bin", "--prompts-file",
                 tmp.file("prompts.txt"), "-n", std::to_string(max_generated), "--temperature",
                 "0", "--threads", "2", "--output-format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  size_t i = 0;
  while (std::getline(lines, line) && i < cases.size()) {
    const json j = json::parse(line);
    const auto prompt_ids = cases[i]["prompt_ids_with_bos"].get<std::vector<int>>();
    const auto after_bos = cases[i]["ids_after_bos"].get<std::vector<int>>();
    const std::vector<int> want(after_bos.begin() + static_cast<int64_t>(prompt_ids.size() - 1),
                                after_bos.end());
    EXPECT_EQ(j["prompt_token_ids"].get<std::vector<int>>(), prompt_ids) << cases[i]["prompt"];
    std::vector<int> got = j["output_token_ids"].get<std::vector<int>>();
    ASSERT_GE(got.size(), want.size()) << cases[i]["prompt"];
    got.resize(want.size());
    EXPECT_EQ(got, want) << cases[i]["prompt"];
    ++i;
  }
  EXPECT_EQ(i, cases.size());
}

TEST(KvserveCliTest, Stories260KTextModePrintsWhatRunCPrints) {
  KVSERVE_SKIP_IF_ABSENT(HasStories(), kStoriesDir << "/stories260K.bin");
  json ref = StoriesReference();
  const json& c = ref["cases"][2];  // "Once upon a time", 64 steps
  ASSERT_EQ(c["prompt"], "Once upon a time");
  Ran r = RunKv({"generate", "--model", kStoriesDir + "/stories260K.bin", "--prompt",
                 "Once upon a time", "-n", "60", "--temperature", "0", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, c["printed_text"].get<std::string>() + "\n");
  EXPECT_NE(r.err.find("llama"), std::string::npos) << "no model summary: " << r.err;
}

TEST(KvserveCliTest, Stories260KConvertedToGgufGivesSameTokens) {
  KVSERVE_SKIP_IF_ABSENT(HasStories(), kStoriesDir << "/stories260K.bin");
  TempDir tmp;
  const std::string out = tmp.file("stories260K.gguf");
  Ran r = RunKv({"convert", "--model", kStoriesDir + "/stories260K.bin", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(fs::exists(out));
  ExpectGreedyMatchesReference(out, "");
  // The converted file embeds the tokenizer: tokenize works from it alone.
  Ran t = RunKv({"tokenize", "--model", out, "--text", "Zoo"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(t.out, "1 410 469 347\n");
}

TEST(KvserveCliTest, ContextFullEndsWithLength) {
  KVSERVE_SKIP_IF_ABSENT(HasStories(), kStoriesDir << "/stories260K.bin");
  // 500 prompt tokens in a 512-token context: prompt + output <= --max-model-len (vLLM's
  // rule, the same in serve), so 12 outputs.
  std::string ids;
  for (int i = 0; i < 500; ++i) ids += std::to_string(300 + i % 100) + " ";
  Ran r = RunKv({"generate", "--model", kStoriesDir + "/stories260K.bin", "--prompt-ids", ids,
                 "-n", "100", "--temperature", "0", "--ignore-eos", "--threads", "1",
             "--output-format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["num_output_tokens"], 12);
  EXPECT_EQ(j["finish_reason"], "length");
  // A prompt longer than the context is an error.
  ids.clear();
  for (int i = 0; i < 513; ++i) ids += "300 ";
  r = RunKv({"generate", "--model", kStoriesDir + "/stories260K.bin", "--prompt-ids", ids});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("error: "), std::string::npos);
  EXPECT_NE(r.err.find("--max-model-len"), std::string::npos) << r.err;
  // --max-model-len lowers the limit below the model's context.
  r = RunKv({"generate", "--model", kStoriesDir + "/stories260K.bin", "--prompt-ids",
             "1 300 301 302", "-n", "100", "--temperature", "0", "--ignore-eos",
             "--max-model-len", "10", "--output-format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = json::parse(r.out);
  EXPECT_EQ(j["num_output_tokens"], 6);
  EXPECT_EQ(j["kv_cache"]["capacity_tokens"], 16);
}

// ---------------------------------------------------------------------------------------------
// tokenize.

TEST(KvserveCliTest, TokenizeVocabOnlyGgufMatchesConformanceVectors) {
  for (const std::string name : {"llama-spm", "gpt-2"}) {
    const std::string vocab = kAssets + "/tokenizers/ggml-vocab-" + name + ".gguf";
    KVSERVE_SKIP_IF_ABSENT(fs::exists(vocab), vocab);
    const std::string inp = ReadFile(vocab + ".inp");
    const std::string outp = ReadFile(vocab + ".out");
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    size_t pos = 0;
    while (true) {
      size_t next = inp.find(sep, pos);
      if (next == std::string::npos) break;
      texts.push_back(inp.substr(pos, next - pos));
      pos = next + sep.size();
    }
    std::vector<std::string> lines;
    std::istringstream ls(outp);
    for (std::string line; std::getline(ls, line);) lines.push_back(line);
    ASSERT_GE(lines.size(), 8u);
    TempDir tmp;
    for (size_t i = 0; i < 4 && i < texts.size(); ++i) {  // a sample: the tokenizer's own
      std::ofstream(tmp.file("t.txt"), std::ios::binary) << texts[i];  // tests cover all
      Ran r = RunKv({"tokenize", "--model", vocab, "--no-bos", "--text-file", tmp.file("t.txt")});
      ASSERT_EQ(r.exit_code, 0) << r.err;
      std::string want = lines[i];
      while (!want.empty() && want.back() == ' ') want.pop_back();
      while (!want.empty() && want.front() == ' ') want.erase(0, 1);
      EXPECT_EQ(r.out, want + "\n") << name << " case " << i;
    }
  }
}

TEST(KvserveCliTest, TokenizeLlama2cModelAddsBos) {
  KVSERVE_SKIP_IF_ABSENT(HasStories(), kStoriesDir << "/stories260K.bin");
  Ran r = RunKv({"tokenize", "--model", kStoriesDir + "/stories260K.bin", "--text",
                 "Once upon a time"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "1 403 407 261 378\n");
  r = RunKv({"tokenize", "--model", kStoriesDir + "/stories260K.bin", "--no-bos", "--text",
             "Once upon a time"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "403 407 261 378\n");
}

// ---------------------------------------------------------------------------------------------
// mkmodel.

// KVSERVE_SIMD picks the kernels' level (never above the CPU's) and the banner says which runs.
TEST(KvserveCliTest, KvserveSimdPicksTheLevelAndTheBannerSaysIt) {
  const std::vector<std::string> args = {"generate", "--prompt", "hi", "-n", "2", "--threads", "1"};
  Ran r = RunKv(args, {"KVSERVE_SIMD=scalar"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("kernels: scalar (this CPU: "), std::string::npos) << r.err;
  r = RunKv(args, {"KVSERVE_SIMD=avx512"});  // avx512 where the CPU has it, else clamped
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const bool ran_avx512 = r.err.find("kernels: avx512 (this CPU: avx512)") != std::string::npos;
  const bool clamped = r.err.find("this CPU has ") != std::string::npos &&
                       r.err.find("at most") != std::string::npos;
  EXPECT_TRUE(ran_avx512 || clamped) << r.err;
  r = RunKv(args, {"KVSERVE_SIMD=sse9"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("KVSERVE_SIMD=sse9 is not one of scalar, avx2, avx512"), std::string::npos)
      << r.err;
}

TEST(KvserveCliTest, MkmodelThenGenerate) {
  TempDir tmp;
  const std::string out = tmp.file("tiny-q8_0.gguf");
  Ran r = RunKv({"mkmodel", "--preset", "tiny", "--dtype", "q8_0", "--seed", "5", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find(out), std::string::npos) << "no final line: " << r.err;
  r = RunKv({"generate", "--model", out, "--prompt", "hello world", "-n", "5", "--ignore-eos",
             "--seed", "1", "--threads", "1", "--output-format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["num_output_tokens"], 5);
  EXPECT_EQ(j["weight_type"], "q8_0");
  EXPECT_EQ(r.err.find("RANDOM"), std::string::npos) << "builtin banner for a file model";
  // tokenize gives the ids generate ran.
  std::string want;
  for (const json& id : j["prompt_token_ids"]) {
    want += (want.empty() ? "" : " ") + std::to_string(id.get<int>());
  }
  r = RunKv({"tokenize", "--model", out, "--text", "hello world"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, want + "\n");
}

// mkmodel --dtype q4_k_m writes llama.cpp's mix (tiny: rows of 128/352 values, so q5_0 and
// q8_0 fallbacks); the banner, generate's JSON, plan and convert report the real bytes by type.
TEST(KvserveCliTest, MkmodelQ4KMixThenBannerPlanAndConvert) {
  TempDir tmp;
  const std::string out = tmp.file("tiny-q4_k_m.gguf");
  Ran r = RunKv({"mkmodel", "--preset", "tiny", "--dtype", "q4_k_m", "--seed", "5", "--threads",
                 "2", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("tiny q4_k_m"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(q5_0 "), std::string::npos) << r.err;
  r = RunKv({"generate", "--model", out, "--prompt", "hello world", "-n", "4", "--ignore-eos",
             "--seed", "1", "--threads", "1", "--output-format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The banner: "weights 0.3 MiB (q5_0 ..., q8_0 ..., f32 ...)".
  EXPECT_NE(r.err.find("weights "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(q5_0 "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(", q8_0 "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(", f32 "), std::string::npos) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["num_output_tokens"], 4);
  const json& by_type = j["weight_bytes_by_type"];
  ASSERT_TRUE(by_type.is_object()) << r.out;
  EXPECT_EQ(by_type["q5_0"].get<int64_t>() + by_type["q8_0"].get<int64_t>() +
                by_type["f32"].get<int64_t>(),
            j["weight_bytes"].get<int64_t>());

  r = RunKv({"plan", "-m", out, "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json plan = json::parse(r.out);
  const json& model = plan["model"];
  ASSERT_TRUE(model["weight_bytes_by_type"].is_object()) << r.out;
  EXPECT_EQ(model["weight_bytes_by_type"]["q5_0"], by_type["q5_0"]);
  EXPECT_NE(model["weights"].get<std::string>().find("mostly q5_0 (q5_0 "), std::string::npos)
      << model["weights"];

  const std::string q40 = tmp.file("tiny-q4_0.gguf");
  r = RunKv({"convert", "--model", out, "--dtype", "q4_0", "-o", q40});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("q4_0, weights "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(q4_0 "), std::string::npos) << r.err;
  r = RunKv({"generate", "--model", q40, "--prompt-ids", "5 6 7", "-n", "2", "--ignore-eos",
             "--threads", "1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(KvserveCliTest, DtypeNamesInHelpAndErrors) {
  for (const char* sub : {"mkmodel", "convert"}) {
    Ran h = RunKv({sub, "--help"});
    ASSERT_EQ(h.exit_code, 0) << h.err;
    for (const char* name : {"q4_0", "q5_1", "q2_k", "q3_k_l", "q4_k_m", "q5_k_s", "q6_k"}) {
      EXPECT_NE(h.out.find(name), std::string::npos) << sub << " --help lacks " << name;
    }
  }
  TempDir tmp;
  Ran r = RunKv({"mkmodel", "--preset", "tiny", "--dtype", "iq2_xxs", "-o", tmp.file("x.gguf")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--dtype must be one of f32, f16, bf16, q8_0, q4_0"), std::string::npos)
      << r.err;
  r = RunKv({"convert", "--model", "/nonexistent", "--dtype", "q7_k", "-o", tmp.file("y.gguf")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("'q7_k'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvserve::cli

// `kvserve prompt-lint`: the text and JSON reports on a timestamped file, chat requests with
// a template file, and errors (a bad line names its number; missing flags). Uses the Llama 2
// vocabulary from ../shared/assets (skipped when absent).
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/testing/test_dependency.h"
#include "cli_test_util.h"

namespace kvserve::cli {
namespace {

using testing::RunKv;
using testing::TempDir;

const std::string kAssets = KVSERVE_ASSETS_DIR;
const std::string kVocab = kAssets + "/tokenizers/ggml-vocab-llama-spm.gguf";

void Write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// A shared instruction block of a few hundred tokens.
std::string SharedText() {
  std::string s;
  for (int i = 0; i < 30; ++i) {
    s += "Rule " + std::to_string(i + 1) + ": answer politely, cite the manual, and never guess. ";
  }
  return s;
}

// 12 requests: "Current time: HH:MM:SS" then the shared text, then a question of their own.
std::string TimestampFile(bool chat) {
  std::string file;
  for (int i = 0; i < 12; ++i) {
    char stamp[64];
    std::snprintf(stamp, sizeof(stamp), "Current time: %02d:%02d:%02d", 9 + i % 3, (17 * i) % 60, (31 * i) % 60);
    const std::string question = "Question " + std::to_string(i) + ": which rule applies to case " +
                                 std::to_string(7 * i + 3) + "?";
    nlohmann::ordered_json body;
    if (chat) {
      body["messages"] = {{{"role", "system"}, {"content", std::string(stamp) + "\n" + SharedText()}},
                          {{"role", "user"}, {"content", question}}};
    } else {
      body["prompt"] = std::string(stamp) + "\n" + SharedText() + "\n" + question;
    }
    file += body.dump() + "\n";
  }
  return file;
}

TEST(PromptLintCommandTest, FindsTheTimestampInTextAndJson) {
  KVSERVE_SKIP_IF_ABSENT(std::filesystem::exists(kVocab), kVocab);
  TempDir tmp;
  Write(tmp.file("r.jsonl"), TimestampFile(/*chat=*/false));
  testing::Ran r = RunKv({"prompt-lint", tmp.file("r.jsonl"), "--model", kVocab});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("prompt-lint: 12 requests in 1 cache namespace"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("span 1: tokens ["), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("vary in 12 of 12 requests"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Rule 1: answer"), std::string::npos) << r.out;  // what follows it

  r = RunKv({"prompt-lint", tmp.file("r.jsonl"), "--model", kVocab, "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["spans"].size(), 1u);
  const nlohmann::json& s = j["spans"][0];
  EXPECT_EQ(s["requests"], 12);
  EXPECT_EQ(s["examples"].size(), 3u);
  EXPECT_EQ(s["examples"][0]["line"], 1);
  EXPECT_NE(s["examples"][0]["text"].get<std::string>().find("00:00"), std::string::npos) << s.dump();
  EXPECT_LT(j["hit_rate"].get<double>(), s["hit_rate_after"].get<double>());
  EXPECT_GT(s["hit_rate_after"].get<double>(), 0.7);

  // A larger block size and fewer examples are passed through.
  r = RunKv({"prompt-lint", tmp.file("r.jsonl"), "--model", kVocab, "--format", "json",
             "--block-size", "64", "--examples", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j64 = nlohmann::json::parse(r.out);
  EXPECT_EQ(j64["block_size"], 64);
  EXPECT_EQ(j64["spans"][0]["examples"].size(), 1u);
}

TEST(PromptLintCommandTest, ChatRequestsWithATemplateFile) {
  KVSERVE_SKIP_IF_ABSENT(std::filesystem::exists(kVocab), kVocab);
  TempDir tmp;
  Write(tmp.file("r.jsonl"), TimestampFile(/*chat=*/true));
  Write(tmp.file("t.jinja"),
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>\n{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}");
  testing::Ran r = RunKv({"prompt-lint", tmp.file("r.jsonl"), "--tokenizer", kVocab,
                          "--chat-template", tmp.file("t.jinja"), "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["spans"].size(), 1u);
  EXPECT_NE(j["spans"][0]["context_before"].get<std::string>().find("<system>Current time:"),
            std::string::npos)
      << j.dump();
}

TEST(PromptLintCommandTest, ErrorsNameTheLineAndTheFile) {
  KVSERVE_SKIP_IF_ABSENT(std::filesystem::exists(kVocab), kVocab);
  TempDir tmp;
  Write(tmp.file("bad.jsonl"), "{\"prompt\": \"x\"}\n{\"prompt\": \"unterminated\n");
  testing::Ran r = RunKv({"prompt-lint", tmp.file("bad.jsonl"), "--model", kVocab});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("bad.jsonl: line 2: not valid JSON"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());

  r = RunKv({"prompt-lint", tmp.file("missing.jsonl"), "--model", kVocab});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot open"), std::string::npos) << r.err;

  r = RunKv({"prompt-lint", tmp.file("bad.jsonl")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("pass --model"), std::string::npos) << r.err;

  r = RunKv({"prompt-lint", "--model", kVocab});  // no file
  EXPECT_EQ(r.exit_code, 2);

  Write(tmp.file("ok.jsonl"), "{\"prompt\": \"x\"}\n");
  r = RunKv({"prompt-lint", tmp.file("ok.jsonl"), "--model", kVocab, "--min-shared-tokens", "4"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("min shared tokens"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvserve::cli

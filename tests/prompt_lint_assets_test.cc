// prompt-lint on real data: the case issue 24 names (a timestamp line before a 2,000-token
// shared system prompt, then a short question), as completions text and as chat messages
// rendered with Llama 3.1's template, tokenized with the Llama 2 SentencePiece vocabulary; the
// request file, the detection and the replays together (src/promptlint). Skips when
// ../shared/assets is absent.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/str_format.h"
#include "base/testing/test_dependency.h"
#include "model/vocab_source.h"
#include "promptlint/prompt_lint_report.h"
#include "promptlint/request_file.h"

namespace kvserve::promptlint {
namespace {

const std::string kAssets = KVSERVE_ASSETS_DIR;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(PromptLintAssetsTest, TimestampBeforeRealSystemPromptIsFoundAndReorderingPays) {
  const std::string vocab_path = kAssets + "/tokenizers/ggml-vocab-llama-spm.gguf";
  const std::string text_path = kAssets + "/text/war-and-peace.txt";
  const std::string template_path = kAssets + "/chat_templates/meta-llama-Llama-3.1-8B-Instruct.jinja";
  KVSERVE_SKIP_IF_ABSENT(std::filesystem::exists(vocab_path) && std::filesystem::exists(text_path) &&
                             std::filesystem::exists(template_path),
                         vocab_path << ", " << text_path << " or " << template_path);
  auto spec = LoadVocabFile(vocab_path, 0);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  auto tok = Tokenizer::Create(std::move(spec).value());
  ASSERT_TRUE(tok.ok());
  // About 2,000 tokens of real text (roughly 4 characters per token), from the start of a line.
  const std::string book = ReadFile(text_path);
  const size_t start = book.find('\n', 20000) + 1;
  const std::string system = book.substr(start, 8000);
  auto templates = ModelChatTemplates::Load("", template_path, "<s>", "</s>");
  ASSERT_TRUE(templates.ok());

  for (const bool chat : {false, true}) {
    SCOPED_TRACE(chat ? "chat" : "completions");
    std::string file;
    for (int i = 0; i < 32; ++i) {
      const std::string stamp =
          StrFormat("Current time: 2024-05-%02d %02d:%02d:%02d UTC", 1 + i % 28, (7 * i) % 24,
                    (13 * i) % 60, (29 * i) % 60);
      const std::string question = StrFormat("Question %d: who is mentioned in paragraph %d?", i, 3 * i + 1);
      nlohmann::ordered_json body;
      if (chat) {
        body["messages"] = {{{"role", "system"}, {"content", stamp + "\n" + system}},
                            {{"role", "user"}, {"content", question}}};
      } else {
        body["prompt"] = stamp + "\n" + system + "\n" + question;
      }
      file += body.dump() + "\n";
    }
    auto bodies = ParseRequestFile(file);
    ASSERT_TRUE(bodies.ok()) << bodies.status().message();
    auto prompts = EncodeRequests(*bodies, {tok->get(), &*templates});
    ASSERT_TRUE(prompts.ok()) << prompts.status().message();
    EXPECT_GT((*prompts)[0].tokens.size(), 1800u);
    auto decode = [&](const std::vector<TokenId>& ids) { return (*tok)->Decode(ids, true); };
    auto report = AnalyzePrompts(*prompts, PromptLintOptions{}, decode);
    ASSERT_TRUE(report.ok()) << report.status().message();
    ASSERT_EQ(report->spans.size(), 1u) << FormatPromptLintText(*report);
    const VolatileSpan& s = report->spans[0];
    EXPECT_EQ(s.num_requests, 32);
    EXPECT_GT(s.shared_tokens, 1800);
    // The span is the varying part of the timestamp line, right after what all share of it.
    EXPECT_NE(s.context_before_text.find("Current time: 2024-05-"), std::string::npos)
        << FormatPromptLintText(*report);
    ASSERT_EQ(s.examples.size(), 3u);
    EXPECT_NE(s.examples[1].text.find("02 07:13:29"), std::string::npos) << s.examples[1].text;
    EXPECT_LT(s.max_span_tokens, 20);
    EXPECT_LT(s.hit_rate_before, 0.05);
    EXPECT_GT(s.hit_rate_after, 0.85);
  }
}

}  // namespace
}  // namespace kvserve::promptlint

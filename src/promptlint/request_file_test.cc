// Reading request files: chat and completions bodies, malformed lines (errors naming the line,
// never a crash), and rendering + tokenizing with a byte-level vocabulary (always available)
// and with a real vocabulary and chat template from ../shared/assets (skipped when absent).
#include "promptlint/request_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/str_format.h"
#include "base/testing/test_dependency.h"
#include "model/vocab_source.h"
#include "promptlint/prompt_lint_report.h"

namespace kvserve::promptlint {
namespace {

const std::string kAssets = KVSERVE_ASSETS_DIR;

// SentencePiece-style vocabulary of <unk>, <s>, </s> and the 256 byte tokens: every byte of
// the text is one token.
std::unique_ptr<Tokenizer> ByteTokenizer() {
  VocabSpec v;
  v.model = VocabSpec::Model::kSpm;
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.token_types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(StrFormat("<0x%02X>", b));
    v.token_types.push_back(TokenType::kByte);
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_bos = true;
  v.add_space_prefix = false;
  auto t = Tokenizer::Create(std::move(v));
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(t).value();
}

Status ErrorOf(std::string_view text) {
  auto r = ParseRequestFile(text);
  return r.ok() ? OkStatus() : r.status();
}

TEST(RequestFileTest, ReadsCompletionsAndChatBodies) {
  const std::string file =
      "{\"model\": \"m\", \"prompt\": \"hello\", \"max_tokens\": 4}\n"
      "\n"
      "{\"prompt\": [\"a\", \"b\"], \"cache_salt\": \"tenant-1\"}\n"
      "{\"prompt\": [5, 6, 7]}\r\n"
      "{\"prompt\": [[5], [6, 7]]}\n"
      "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", "
      "\"content\": \"Q\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
      "\"f\"}}], \"chat_template_kwargs\": {\"enable_thinking\": false}, "
      "\"add_generation_prompt\": false}\n"
      "   \n";
  auto r = ParseRequestFile(file);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 5u);
  const std::vector<RequestBody>& b = *r;
  EXPECT_EQ(b[0].line, 1);
  EXPECT_FALSE(b[0].chat);
  ASSERT_EQ(b[0].prompts.size(), 1u);
  EXPECT_EQ(*b[0].prompts[0].text, "hello");
  EXPECT_EQ(b[1].line, 3);  // the blank line counts
  EXPECT_EQ(b[1].cache_salt, "tenant-1");
  EXPECT_EQ(b[1].prompts.size(), 2u);
  EXPECT_FALSE(b[2].prompts[0].text.has_value());
  EXPECT_EQ(b[2].prompts[0].ids, (std::vector<TokenId>{5, 6, 7}));
  EXPECT_EQ(b[3].prompts.size(), 2u);
  EXPECT_TRUE(b[4].chat);
  EXPECT_EQ(b[4].line, 6);
  EXPECT_EQ(b[4].chat_inputs.messages.size(), 2u);
  ASSERT_TRUE(b[4].chat_inputs.tools.has_value());
  EXPECT_EQ(b[4].chat_inputs.tools->size(), 1u);
  EXPECT_FALSE(b[4].chat_inputs.add_generation_prompt);
  EXPECT_EQ(b[4].chat_inputs.extra["enable_thinking"], false);
}

TEST(RequestFileTest, MalformedLinesNameTheLineAndNeverCrash) {
  const std::string ok = "{\"prompt\": \"x\"}\n";
  struct Case {
    std::string line;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"{\"prompt\": \"x\"", "not valid JSON"},
      {"not json at all", "not valid JSON"},
      {"[1, 2]", "expected a JSON object"},
      {"{\"model\": \"m\"}", "needs \"messages\""},
      {"{\"prompt\": \"x\", \"messages\": []}", "has both"},
      {"{\"prompt\": 5}", "\"prompt\" must be"},
      {"{\"prompt\": []}", "\"prompt\" must be"},
      {"{\"prompt\": [\"a\", 5]}", "\"prompt\" must be"},
      {"{\"prompt\": [1, -2]}", "token ids"},
      {"{\"prompt\": [1, 1e3]}", "token ids"},
      {"{\"prompt\": [1, 99999999999]}", "token ids"},
      {"{\"prompt\": \"x\", \"cache_salt\": \"\"}", "cache_salt"},
      {"{\"messages\": {}}", "\"messages\" must be"},
      {"{\"messages\": []}", "\"messages\" must be"},
      {"{\"messages\": [5]}", "messages[0] must be an object"},
      {"{\"messages\": [{\"content\": \"x\"}]}", "messages[0].role"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": 3}", "\"tools\""},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"add_generation_prompt\": 1}",
       "add_generation_prompt"},
      {std::string(100000, '['), "nested more than 128"},
      {"{\"prompt\": \"" + std::string(100000, '[') + "\"}", ""},  // brackets in a string: fine
  };
  for (const Case& c : cases) {
    const Status s = ErrorOf(ok + "\n" + c.line + "\n" + ok);
    if (c.message.empty()) {
      EXPECT_TRUE(s.ok()) << c.line.substr(0, 80) << ": " << s.message();
      continue;
    }
    ASSERT_FALSE(s.ok()) << c.line.substr(0, 80);
    EXPECT_EQ(s.message().rfind("line 3: ", 0), 0u) << s.message();
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s.message();
  }
  EXPECT_FALSE(ErrorOf("").ok());
  EXPECT_FALSE(ErrorOf("\n  \n").ok());
  EXPECT_NE(ErrorOf("").message().find("no request"), std::string::npos);
}

TEST(RequestFileTest, EncodesAsTheServerDoes) {
  auto tok = ByteTokenizer();
  auto templates = ModelChatTemplates::Load("", "", "<s>", "</s>");  // ChatML
  ASSERT_TRUE(templates.ok()) << templates.status().message();
  auto bodies = ParseRequestFile(
      "{\"prompt\": \"ab\", \"cache_salt\": \"t\"}\n"
      "{\"prompt\": [[3, 4], [5]]}\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n");
  ASSERT_TRUE(bodies.ok());
  auto prompts = EncodeRequests(*bodies, {tok.get(), &*templates});
  ASSERT_TRUE(prompts.ok()) << prompts.status().message();
  ASSERT_EQ(prompts->size(), 4u);
  const std::vector<LintPrompt>& p = *prompts;
  // Completions text: BOS, then one byte token per byte ('a' = 0x61 -> 3 + 0x61).
  EXPECT_EQ(p[0].tokens, (std::vector<TokenId>{1, 3 + 'a', 3 + 'b'}));
  EXPECT_EQ(p[0].cache_namespace, "t");
  EXPECT_EQ(p[1].tokens, (std::vector<TokenId>{3, 4}));
  EXPECT_EQ(p[2].line, 2);
  EXPECT_EQ(p[2].tokens, (std::vector<TokenId>{5}));
  // Chat: the ChatML text with the generation prompt, no BOS added.
  const std::string chatml = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
  ASSERT_EQ(p[3].tokens.size(), chatml.size());
  EXPECT_EQ(p[3].tokens[0], 3 + '<');
  EXPECT_EQ(p[3].line, 3);

  // Ids outside the vocabulary, and chat without templates, name the line.
  auto bad = ParseRequestFile("{\"prompt\": \"x\"}\n{\"prompt\": [1, 300]}\n");
  ASSERT_TRUE(bad.ok());
  auto e = EncodeRequests(*bad, {tok.get(), &*templates});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("line 2: prompt token id 300 is outside"), std::string::npos)
      << e.status().message();
  auto chat = ParseRequestFile("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}\n");
  ASSERT_TRUE(chat.ok());
  e = EncodeRequests(*chat, {tok.get(), nullptr});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message().rfind("line 1: ", 0), 0u);
}

TEST(RequestFileTest, TemplateErrorsNameTheLine) {
  auto tok = ByteTokenizer();
  const std::string path = ::testing::TempDir() + "/prompt_lint_raise.jinja";
  std::ofstream(path) << "{% if messages[0].role == 'system' %}{{ raise_exception('no system "
                         "role') }}{% endif %}{{ messages[0].content }}";
  auto templates = ModelChatTemplates::Load("", path, "<s>", "</s>");
  ASSERT_TRUE(templates.ok()) << templates.status().message();
  auto bodies = ParseRequestFile(
      "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}\n"
      "{\"messages\": [{\"role\": \"system\", \"content\": \"x\"}]}\n");
  ASSERT_TRUE(bodies.ok());
  auto e = EncodeRequests(*bodies, {tok.get(), &*templates});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("line 2: chat template: "), std::string::npos)
      << e.status().message();
  EXPECT_NE(e.status().message().find("no system role"), std::string::npos);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The case issue 24 names: a timestamp line before a 2,000-token shared system prompt, then a
// short question, as completions text and as chat messages (Llama 3.1's template), tokenized
// with the Llama 2 SentencePiece vocabulary.
TEST(RequestFileTest, TimestampBeforeRealSystemPromptWithRealTokenizer) {
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

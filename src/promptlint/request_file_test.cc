// Reading request files: chat and completions bodies, malformed lines (errors naming the line,
// never a crash), and rendering + tokenizing with a byte-level vocabulary (the real vocabulary
// and template case is tests/prompt_lint_assets_test.cc).
#include "promptlint/request_file.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "base/str_format.h"

namespace kvserve::promptlint {
namespace {

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

TEST(RequestFileTest, MutatedFilesGiveOkOrALineError) {
  // Deterministic random edits of a valid file: every result parses or names a line.
  const std::string valid =
      "{\"prompt\": \"hello\", \"cache_salt\": \"s\"}\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": "
      "\"x\"}]}], \"tools\": [], \"add_generation_prompt\": true}\n"
      "{\"prompt\": [[1, 2], [3]]}\n";
  const std::string alphabet = "{}[]\",:0123456789-ae\\ \n\t";
  std::mt19937_64 rng(24);
  auto tok = ByteTokenizer();
  auto templates = ModelChatTemplates::Load("", "", "<s>", "</s>");
  ASSERT_TRUE(templates.ok());
  for (int iter = 0; iter < 2000; ++iter) {
    std::string text = valid;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % text.size();
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0: text[pos] = c; break;
        case 1: text.insert(pos, 1, c); break;
        default: text.erase(pos, 1); break;
      }
    }
    auto r = ParseRequestFile(text);
    if (!r.ok()) {
      EXPECT_TRUE(r.status().message().rfind("line ", 0) == 0 ||
                  r.status().message().find("no request") != std::string::npos)
          << r.status().message();
      continue;
    }
    auto p = EncodeRequests(*r, {tok.get(), &*templates});
    if (!p.ok()) {
      EXPECT_EQ(p.status().message().rfind("line ", 0), 0u) << p.status().message();
    }
  }
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

}  // namespace
}  // namespace kvserve::promptlint

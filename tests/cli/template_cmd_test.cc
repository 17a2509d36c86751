// `kvserve template`: exact output, flags, and errors.
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "cli_test_util.h"

namespace kvserve::cli {
namespace {

using testing::RunKv;
using testing::TempDir;

void Write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

TEST(TemplateCommandTest, PrintsExactlyTheRenderedPrompt) {
  TempDir tmp;
  Write(tmp.file("t.jinja"),
        "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content | trim }}\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant]{% endif %}\n");
  Write(tmp.file("m.json"), R"([{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi"}])");
  testing::Ran r = RunKv({"template", "--chat-template", tmp.file("t.jinja"), "--messages", tmp.file("m.json"),
                          "--add-generation-prompt", "--bos-token", "<s>"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<s>[system] Be brief.\n[user] Hi\n[assistant]");  // the file's final newline is dropped, as jinja2 does

  r = RunKv({"template", "--chat-template", tmp.file("t.jinja"), "--messages", tmp.file("m.json")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[system] Be brief.\n[user] Hi\n");
}

TEST(TemplateCommandTest, ToolsAndRequestObject) {
  TempDir tmp;
  Write(tmp.file("t.jinja"), "{{ tools | tojson }}|{{ messages | length }}|{{ date_string }}{{ eos_token }}");
  Write(tmp.file("req.json"),
        R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"date_string": "D"}})");
  Write(tmp.file("tools.json"), R"([{"type": "function", "function": {"name": "f", "parameters": {"b": 1, "a": "é"}}}])");
  testing::Ran r = RunKv({"template", "--chat-template", tmp.file("t.jinja"), "--messages", tmp.file("req.json"),
                          "--tools", tmp.file("tools.json"), "--eos-token", "</s>"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, R"([{"type": "function", "function": {"name": "f", "parameters": {"b": 1, "a": "é"}}}]|1|D</s>)");
}

TEST(TemplateCommandTest, ModelFolderTemplateAndChatMlFallback) {
  TempDir tmp;
  Write(tmp.file("m.json"), R"([{"role": "user", "content": "Hi"}])");
  Write(tmp.file("tokenizer_config.json"),
        R"({"bos_token": "<|b|>", "chat_template": "{{ bos_token }}{{ messages[0].content }}"})");
  testing::Ran r = RunKv({"template", "--model", tmp.path(), "--messages", tmp.file("m.json")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<|b|>Hi");

  TempDir bare;
  Write(bare.file("tokenizer_config.json"), "{}");
  r = RunKv({"template", "--model", bare.path(), "--messages", tmp.file("m.json"), "--add-generation-prompt"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_NE(r.err.find("ChatML"), std::string::npos) << r.err;
}

TEST(TemplateCommandTest, Errors) {
  TempDir tmp;
  Write(tmp.file("m.json"), R"([{"role": "user", "content": "Hi"}])");
  Write(tmp.file("raise.jinja"), "{{ raise_exception('Only ' ~ 'system') }}");
  Write(tmp.file("bad.jinja"), "line one\n{% for x in %}");
  testing::Ran r = RunKv({"template", "--chat-template", tmp.file("raise.jinja"), "--messages", tmp.file("m.json")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("Only system"), std::string::npos) << r.err;

  r = RunKv({"template", "--chat-template", tmp.file("bad.jinja"), "--messages", tmp.file("m.json")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("line 2"), std::string::npos) << r.err;

  r = RunKv({"template", "--messages", tmp.file("m.json")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--chat-template"), std::string::npos) << r.err;

  Write(tmp.file("notjson.json"), "[{");
  r = RunKv({"template", "--chat-template", tmp.file("raise.jinja"), "--messages", tmp.file("notjson.json")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not valid JSON"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvserve::cli

// ChatTemplate against Python jinja2 (configured as transformers configures it, see
// tests/data/chat/render_jinja2.py): the real tool-using templates in tests/data/chat_templates
// (sources in SOURCES.md there), ChatML, Llama 2 and the templates in
// ../shared/assets/chat_templates, on every conversation in tests/data/chat, each with tools (its
// own, or the two functions of tests/data/chat_templates/tools.json) and without (tools = None),
// with and without the generation prompt, compared byte for byte; where jinja2 raises we must
// fail too. Also the tool-call arguments form, template discovery (GGUF metadata,
// tokenizer_config.json, files, ChatML fallback).
#include "chat/chat_template.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <gtest/gtest.h>

#include "base/check.h"
#include "base/testing/test_dependency.h"
#include "model/gguf.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

constexpr std::time_t kPinnedNow = 1721952000;  // 2024-07-26 00:00:00 UTC

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> ListFiles(const std::string& dir, const std::string& ext) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ext) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string AssetsTemplateDir() { return std::string(KVSERVE_ASSETS_DIR) + "/chat_templates"; }
std::string TestDataDir() { return KVSERVE_TESTDATA_DIR; }

// A python3 with jinja2, or "".
const std::string& FindPython() {
  static const std::string python = [] {
    for (const char* cand : {"python3", "/usr/bin/python3"}) {
      const std::string cmd = std::string(cand) + " -c 'import jinja2' >/dev/null 2>&1";
      if (std::system(cmd.c_str()) == 0) return std::string(cand);
    }
    return std::string();
  }();
  return python;
}

struct Case {
  std::string template_path;
  std::string conversation;  // file stem
  ojson conv;
  bool add_generation_prompt = false;
  // The conversation's own tools, or DefaultTools() when it has none; else tools = None.
  bool with_tools = false;
};

// Two functions with JSON-schema parameters, given to conversations without tools of their own.
const ojson& DefaultTools() {
  static const ojson tools = [] {
    std::ifstream in(std::string(KVSERVE_TESTDATA_DIR) + "/chat_templates/tools.json", std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ojson::parse(ss.str())["tools"];
  }();
  return tools;
}

const ojson& ToolsOf(const Case& c) {
  return c.conv.contains("tools") ? c.conv["tools"] : DefaultTools();
}

struct Reference {
  bool ok = false;
  std::string text_or_error;
};

// Runs the reference renderer (one python process) over the cases.
std::vector<Reference> RenderWithJinja2(const std::vector<Case>& cases, std::string* error) {
  ojson job;
  job["cases"] = ojson::array();
  for (const Case& c : cases) {
    ojson j;
    j["template"] = c.template_path;
    j["messages"] = c.conv["messages"];
    if (c.with_tools) j["tools"] = ToolsOf(c);
    j["add_generation_prompt"] = c.add_generation_prompt;
    j["bos_token"] = "<s>";
    j["eos_token"] = "</s>";
    j["extra"] = c.conv.value("extra", ojson::object());
    j["now"] = kPinnedNow;
    job["cases"].push_back(j);
  }
  char tmpl[] = "/tmp/kvserve_chat_XXXXXX";
  const int fd = ::mkstemp(tmpl);
  if (fd < 0) {
    *error = "mkstemp failed";
    return {};
  }
  ::close(fd);
  const std::string in_path = tmpl;
  {
    std::ofstream out(in_path, std::ios::binary);
    out << job.dump();
  }
  const std::string cmd = FindPython() + " " + TestDataDir() + "/chat/render_jinja2.py < " + in_path;
  std::string output;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p != nullptr) {
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) output.append(buf, n);
    const int status = ::pclose(p);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) *error = "reference renderer failed: " + cmd;
  } else {
    *error = "cannot run " + cmd;
  }
  std::remove(in_path.c_str());
  if (!error->empty()) return {};
  std::vector<Reference> refs;
  const ojson results = ojson::parse(output, nullptr, false);
  if (!results.is_array() || results.size() != cases.size()) {
    *error = "bad output from the reference renderer";
    return {};
  }
  for (const ojson& r : results) {
    Reference ref;
    ref.ok = r.value("ok", false);
    ref.text_or_error = ref.ok ? r.value("text", "") : r.value("error", "");
    refs.push_back(std::move(ref));
  }
  return refs;
}

// tests/data/chat_templates (tool-using templates of real models, see SOURCES.md there, plus
// ChatML and Llama 2) and the assets' templates, each once (by file name).
std::vector<std::string> AllTemplates() {
  std::vector<std::string> t = ListFiles(TestDataDir() + "/chat_templates", ".jinja");
  for (const std::string& a : ListFiles(AssetsTemplateDir(), ".jinja")) {
    const bool dup = std::any_of(t.begin(), t.end(), [&](const std::string& x) {
      return fs::path(x).filename() == fs::path(a).filename();
    });
    if (!dup) t.push_back(a);
  }
  return t;
}

std::string Stem(const std::string& path) { return fs::path(path).stem().string(); }

std::vector<Case> CasesFor(const std::string& template_path) {
  std::vector<Case> cases;
  for (const std::string& conv_path : ListFiles(TestDataDir() + "/chat", ".json")) {
    const ojson conv = ojson::parse(ReadFile(conv_path));
    for (bool tools : {false, true}) {
      for (bool agp : {false, true}) cases.push_back({template_path, Stem(conv_path), conv, agp, tools});
    }
  }
  return cases;
}

class Jinja2ReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(Jinja2ReferenceTest, MatchesJinja2ByteForByte) {
  KVSERVE_SKIP_IF_ABSENT(!FindPython().empty(), "python3 with jinja2 (apt-get install python3-jinja2)");
  const std::string template_path = GetParam();
  const std::string source = ReadFile(template_path);
  StatusOr<ChatTemplate> tmpl = ChatTemplate::FromString(source);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();

  const std::vector<Case> cases = CasesFor(template_path);
  ASSERT_GE(cases.size(), 10u);
  // jinja2's results for this template's cases only, one python run: ctest runs each template
  // in its own process, where rendering every template's cases made each test pay for all.
  std::string error;
  const std::vector<Reference> refs = RenderWithJinja2(cases, &error);
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_EQ(refs.size(), cases.size());

  int matched_text = 0, matched_error = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(Stem(template_path) + " / " + c.conversation + (c.with_tools ? " / tools" : " / no tools") +
                 (c.add_generation_prompt ? " / add_generation_prompt" : ""));
    ChatTemplateInputs in;
    in.messages = c.conv["messages"];
    if (c.with_tools) in.tools = ToolsOf(c);
    in.add_generation_prompt = c.add_generation_prompt;
    in.bos_token = "<s>";
    in.eos_token = "</s>";
    in.extra = c.conv.value("extra", ojson::object());
    in.now_unix_seconds = kPinnedNow;
    StatusOr<std::string> ours = tmpl->Render(in);
    if (refs[i].ok) {
      ASSERT_TRUE(ours.ok()) << "jinja2 rendered but we failed: " << ours.status().ToString();
      EXPECT_EQ(*ours, refs[i].text_or_error);
      if (*ours == refs[i].text_or_error) ++matched_text;
    } else {
      EXPECT_FALSE(ours.ok()) << "jinja2 failed (" << refs[i].text_or_error << ") but we rendered:\n"
                              << *ours;
      if (!ours.ok()) {
        ++matched_error;
        // raise_exception messages come through unchanged.
        const std::string& ref_err = refs[i].text_or_error;
        const std::string prefix = "TemplateError: ";
        if (ref_err.rfind(prefix, 0) == 0) {
          EXPECT_EQ(ours.status().message(), ref_err.substr(prefix.size()));
        }
      }
    }
  }
  std::printf("[ jinja2   ] %s: %d/%zu identical renders, %d/%zu errors on both sides\n",
              Stem(template_path).c_str(), matched_text, cases.size(), matched_error, cases.size());
}

INSTANTIATE_TEST_SUITE_P(Templates, Jinja2ReferenceTest, ::testing::ValuesIn(AllTemplates()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = Stem(info.param);
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(ChatTemplateTest, AssetsPresentOrSkipped) {
  KVSERVE_SKIP_IF_ABSENT(!ListFiles(AssetsTemplateDir(), ".jinja").empty(),
                         ".jinja templates in " << AssetsTemplateDir()
                                                << " (only ChatML and Llama 2 are compared)");
  EXPECT_GE(ListFiles(AssetsTemplateDir(), ".jinja").size(), 7u);
}

TEST(ChatTemplateTest, ToolCallArgumentsForm) {
  auto form_of = [](const std::string& file) {
    StatusOr<ChatTemplate> t = ChatTemplate::FromString(ReadFile(TestDataDir() + "/chat_templates/" + file));
    KV_CHECK(t.ok()) << t.status().ToString();
    return DetectToolCallArgumentsForm(*t);
  };
  // These concatenate the arguments as text; the rest print an object with tojson.
  EXPECT_EQ(form_of("deepseek-ai-DeepSeek-V3.1.jinja"), ToolCallArgumentsForm::kString);
  EXPECT_EQ(form_of("meetkai-functionary-medium-v3.1.jinja"), ToolCallArgumentsForm::kString);
  EXPECT_EQ(form_of("meetkai-functionary-medium-v3.2.jinja"), ToolCallArgumentsForm::kString);
  EXPECT_EQ(form_of("Qwen-Qwen3-0.6B.jinja"), ToolCallArgumentsForm::kObject);
  EXPECT_EQ(form_of("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja"), ToolCallArgumentsForm::kObject);
  EXPECT_EQ(form_of("openai-gpt-oss-120b.jinja"), ToolCallArgumentsForm::kObject);
  EXPECT_EQ(DetectToolCallArgumentsForm(ChatMlTemplate()), ToolCallArgumentsForm::kObject);

  ojson messages = ojson::parse(R"([{"role": "user", "content": "x"},
    {"role": "assistant", "content": "", "tool_calls": [
      {"function": {"name": "a", "arguments": "{\"city\": \"Zürich\", \"n\": 1.0}"}},
      {"function": {"name": "b", "arguments": "not json"}},
      {"function": {"name": "c", "arguments": "[1, 2]"}}]}])");
  NormalizeToolCallArguments(ToolCallArgumentsForm::kObject, &messages);
  const ojson& calls = messages[1]["tool_calls"];
  EXPECT_TRUE(calls[0]["function"]["arguments"].is_object());
  EXPECT_EQ(calls[1]["function"]["arguments"], "not json");
  EXPECT_EQ(calls[2]["function"]["arguments"], "[1, 2]");  // only objects become objects
  NormalizeToolCallArguments(ToolCallArgumentsForm::kString, &messages);
  EXPECT_EQ(calls[0]["function"]["arguments"], "{\"city\": \"Zürich\", \"n\": 1.0}");
  EXPECT_EQ(messages[0], ojson::parse(R"({"role": "user", "content": "x"})"));

  // An OpenAI-style conversation (string arguments) renders with every template that takes
  // tool calls in either form, once given the form the template takes.
  StatusOr<ChatTemplate> deepseek =
      ChatTemplate::FromString(ReadFile(TestDataDir() + "/chat_templates/deepseek-ai-DeepSeek-V3.1.jinja"));
  ASSERT_TRUE(deepseek.ok());
  ChatTemplateInputs in;
  ASSERT_TRUE(ParseConversationJson(ojson::parse(ReadFile(TestDataDir() + "/chat/tools_empty_content.json")),
                                    "tools_empty_content.json", &in).ok());
  EXPECT_FALSE(deepseek->Render(in).ok());  // object arguments: jinja2 fails the same way
  NormalizeToolCallArguments(DetectToolCallArgumentsForm(*deepseek), &in.messages);
  StatusOr<std::string> text = deepseek->Render(in);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_NE(text->find("{\"location\": \"Paris, France\", \"unit\": \"celsius\"}"), std::string::npos) << *text;
}

TEST(ChatTemplateTest, MessageContentForm) {
  auto form_of = [](const std::string& file) {
    StatusOr<ChatTemplate> t = ChatTemplate::FromString(ReadFile(TestDataDir() + "/chat_templates/" + file));
    KV_CHECK(t.ok()) << t.status().ToString();
    return DetectMessageContentForm(*t);
  };
  EXPECT_EQ(DetectMessageContentForm(ChatMlTemplate()), MessageContentForm::kString);
  EXPECT_EQ(form_of("mistralai-Mistral-Small-3.2-24B-Instruct-2506.jinja"), MessageContentForm::kParts);
  EXPECT_EQ(form_of("LiquidAI-LFM2-8B-A1B.jinja"), MessageContentForm::kString);

  ojson messages = ojson::parse(R"([
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}]},
    {"role": "assistant", "content": null, "tool_calls": []},
    {"role": "user", "content": "plain"}])");
  ojson parts = messages;
  NormalizeMessageContent(MessageContentForm::kParts, &parts);
  EXPECT_TRUE(parts[0]["content"].is_array());
  EXPECT_EQ(parts[1]["content"], "");
  NormalizeMessageContent(MessageContentForm::kString, &messages);
  EXPECT_EQ(messages[0]["content"], "a\nb");
  EXPECT_EQ(messages[1]["content"], "");
  EXPECT_EQ(messages[2]["content"], "plain");
}

// Issue 17's bar: at least 15 real tool-using templates in the reference test above.
TEST(ChatTemplateTest, AtLeastFifteenRealToolTemplates) {
  int num_tool_templates = 0;
  for (const std::string& path : ListFiles(TestDataDir() + "/chat_templates", ".jinja")) {
    if (ReadFile(path).find("tool") != std::string::npos) ++num_tool_templates;
  }
  EXPECT_GE(num_tool_templates, 15);
}

TEST(ChatTemplateTest, ChatMl) {
  ChatTemplate t = ChatMlTemplate();
  ChatTemplateInputs in;
  in.messages = ojson::parse(R"([{"role":"system","content":"S"},{"role":"user","content":"Hi"}])");
  in.add_generation_prompt = true;
  StatusOr<std::string> r = t.Render(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, VariablesAndExtras) {
  StatusOr<ChatTemplate> t = ChatTemplate::FromString(
      "{{ bos_token }}|{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}|"
      "{{ date_string }}|{{ strftime_now('%Y-%m-%d') }}|{{ eos_token }}");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ChatTemplateInputs in;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.extra["date_string"] = "today";
  in.now_unix_seconds = kPinnedNow;
  StatusOr<std::string> r = t->Render(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "<s>|True|True|False|today|2024-07-26|</s>");
  in.tools = ojson::array();
  EXPECT_EQ(*t->Render(in), "<s>|False|True|False|today|2024-07-26|</s>");
}

TEST(ChatTemplateTest, ErrorsAreStatuses) {
  EXPECT_FALSE(ChatTemplate::FromString("{% if %}").ok());
  StatusOr<ChatTemplate> t = ChatTemplate::FromString("{{ raise_exception('nope: ' + messages[0].role) }}");
  ASSERT_TRUE(t.ok());
  ChatTemplateInputs in;
  in.messages = ojson::parse(R"([{"role":"user","content":"x"}])");
  StatusOr<std::string> r = t->Render(in);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "nope: user");
  in.messages = ojson::object();
  EXPECT_FALSE(t->Render(in).ok());
}

TEST(ChatTemplateTest, ConversationJsonArrayOrRequestObject) {
  ChatTemplateInputs in;
  ASSERT_TRUE(ParseConversationJson(ojson::parse(R"([{"role":"user","content":"Hi"}])"), "--m", &in).ok());
  EXPECT_EQ(in.messages.size(), 1u);
  EXPECT_FALSE(in.tools.has_value());

  ChatTemplateInputs req;
  ASSERT_TRUE(ParseConversationJson(ojson::parse(R"({"messages": [{"role":"user","content":"Hi"}],
      "tools": [{"type": "function"}], "chat_template_kwargs": {"b": 1, "a": 2},
      "extra": {"c": 3}, "other": 4})"), "--m", &req).ok());
  EXPECT_EQ(req.messages.size(), 1u);
  ASSERT_TRUE(req.tools.has_value());
  EXPECT_EQ(req.tools->size(), 1u);
  EXPECT_EQ(req.extra.dump(), R"({"b":1,"a":2,"c":3})");  // key order kept

  ChatTemplateInputs null_tools;
  ASSERT_TRUE(ParseConversationJson(ojson::parse(R"({"messages": [], "tools": null})"), "--m",
                                    &null_tools).ok());
  EXPECT_FALSE(null_tools.tools.has_value());

  for (const char* bad : {R"({"messages": 3})", R"({"msgs": []})", "7", R"("text")"}) {
    ChatTemplateInputs b;
    Status s = ParseConversationJson(ojson::parse(bad), "--messages", &b);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(),
              "--messages must hold a JSON array of messages or an object with \"messages\"");
  }
}

TEST(ChatTemplateTest, RenderOnceTakesTheToolUseVariantForTools) {
  LoadedChatTemplate loaded;
  loaded.source = "default:{{ messages[0].content }}";
  loaded.tool_use_source = "tools:{{ tools | length }}";
  ChatTemplateInputs in;
  in.messages = ojson::parse(R"([{"role":"user","content":"Hi"}])");
  EXPECT_EQ(*RenderOnce(loaded, in), "default:Hi");
  in.tools = ojson::array();  // an empty list is no tools
  EXPECT_EQ(*RenderOnce(loaded, in), "default:Hi");
  in.tools = ojson::parse(R"([{"type": "function"}, {"type": "function"}])");
  EXPECT_EQ(*RenderOnce(loaded, in), "tools:2");
  loaded.tool_use_source.reset();
  EXPECT_EQ(*RenderOnce(loaded, in), "default:Hi");
  loaded.source = "{% if %}";
  EXPECT_FALSE(RenderOnce(loaded, in).ok());
}

// Mutated real templates (cut, duplicated and spliced pieces, stray tag characters) must parse
// or fail with a Status, and render or fail with a Status; never crash or hang.
TEST(ChatTemplateTest, MutatedTemplatesNeverCrash) {
  std::vector<std::string> sources = {kChatMlTemplateSource};
  for (const std::string& t : AllTemplates()) sources.push_back(ReadFile(t));
  const ojson conv = ojson::parse(ReadFile(TestDataDir() + "/chat/tools.json"));
  ChatTemplateInputs in;
  in.messages = conv["messages"];
  in.tools = conv["tools"];
  in.add_generation_prompt = true;
  std::mt19937_64 rng(12345);
  const char* pieces[] = {"{%", "%}", "{{", "}}", "{#", "#}", "-", "(", ")", "[", "]", "'", "\"", "|", ".",
                          " if ", " for ", " endfor ", " endif ", " else ", " set ", " macro ", " not ", " in "};
  int parsed = 0, rendered = 0, total = 0;
  for (const std::string& src : sources) {
    for (int k = 0; k < 150; ++k) {
      std::string m = src;
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int e = 0; e < edits && !m.empty(); ++e) {
        const size_t a = rng() % m.size();
        const size_t len = rng() % std::min<size_t>(40, m.size() - a + 1);
        switch (rng() % 3) {
          case 0: m.erase(a, len); break;
          case 1: m.insert(rng() % (m.size() + 1), m.substr(a, len)); break;
          default: m.insert(rng() % (m.size() + 1), pieces[rng() % std::size(pieces)]); break;
        }
      }
      ++total;
      StatusOr<ChatTemplate> t = ChatTemplate::FromString(m);
      if (!t.ok()) continue;
      ++parsed;
      rendered += t->Render(in).ok();
    }
  }
  std::printf("[ mutated  ] %d templates: %d parsed, %d rendered\n", total, parsed, rendered);
  EXPECT_GT(parsed, 0);
}

class LoadChatTemplateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvserve_chat_load_XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream out(dir_ + "/" + name, std::ios::binary);
    out << text;
  }
  std::string dir_;
};

TEST_F(LoadChatTemplateTest, HfFolderStringTemplate) {
  Write("tokenizer_config.json",
        R"({"bos_token": "<|begin|>", "eos_token": {"content": "<|end|>"}, "chat_template": "{{ bos_token }}T"})");
  StatusOr<LoadedChatTemplate> t = LoadChatTemplate(dir_, "");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->source, "{{ bos_token }}T");
  EXPECT_EQ(t->bos_token, "<|begin|>");
  EXPECT_EQ(t->eos_token, "<|end|>");
  EXPECT_FALSE(t->is_chatml_fallback);
  EXPECT_EQ(t->origin, "tokenizer_config.json");
}

TEST_F(LoadChatTemplateTest, HfFolderNamedTemplates) {
  Write("tokenizer_config.json",
        R"({"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]})");
  StatusOr<LoadedChatTemplate> t = LoadChatTemplate(dir_, "");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->SourceFor(false), "D");
  EXPECT_EQ(t->SourceFor(true), "T");
}

TEST_F(LoadChatTemplateTest, HfFolderChatTemplateJinjaWins) {
  Write("tokenizer_config.json", R"({"chat_template": "old"})");
  Write("chat_template.jinja", "new");
  StatusOr<LoadedChatTemplate> t = LoadChatTemplate(dir_, "");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->source, "new");
}

TEST_F(LoadChatTemplateTest, FallbackToChatMl) {
  Write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  StatusOr<LoadedChatTemplate> t = LoadChatTemplate(dir_, "");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->is_chatml_fallback);
  EXPECT_EQ(t->source, kChatMlTemplateSource);
  EXPECT_EQ(t->eos_token, "</s>");
}

TEST_F(LoadChatTemplateTest, FileOverridesModel) {
  Write("tokenizer_config.json", R"({"bos_token": "<s>", "chat_template": "model"})");
  Write("t.jinja", "file");
  StatusOr<LoadedChatTemplate> t = LoadChatTemplate(dir_, dir_ + "/t.jinja");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->source, "file");
  EXPECT_EQ(t->bos_token, "<s>");
  EXPECT_EQ(t->origin, "file");
  EXPECT_FALSE(LoadChatTemplate("", dir_ + "/missing.jinja").ok());
  EXPECT_FALSE(LoadChatTemplate(dir_ + "/missing.gguf", "").ok());
  EXPECT_FALSE(LoadChatTemplate("", "").ok());
}

TEST_F(LoadChatTemplateTest, GgufMetadata) {
  GgufWriter w;
  w.Set("general.architecture", GgufValue::String("llama"));
  w.Set("tokenizer.chat_template", GgufValue::String("{{ bos_token }}G{{ eos_token }}"));
  w.Set("tokenizer.ggml.tokens", GgufValue::StringArray({"<unk>", "<s>", "</s>", "a"}));
  w.Set("tokenizer.ggml.bos_token_id", GgufValue::U32(1));
  w.Set("tokenizer.ggml.eos_token_id", GgufValue::U32(2));
  const std::string path = dir_ + "/m.gguf";
  ASSERT_TRUE(w.Write(path).ok());
  StatusOr<LoadedChatTemplate> t = LoadChatTemplate(path, "");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->source, "{{ bos_token }}G{{ eos_token }}");
  EXPECT_EQ(t->bos_token, "<s>");
  EXPECT_EQ(t->eos_token, "</s>");
  EXPECT_EQ(t->origin, "gguf");
}

TEST(ChatTemplateTest, RealGgufModelIfPresent) {
  const std::vector<std::string> candidates = {std::string(KVSERVE_ASSETS_DIR) + "/models"};
  std::string found;
  for (const auto& dir : candidates) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
      if (e.path().extension() == ".gguf") {
        found = e.path().string();
        break;
      }
    }
  }
  KVSERVE_SKIP_IF_ABSENT(!found.empty(), "a GGUF model under " << KVSERVE_ASSETS_DIR << "/models");
  StatusOr<LoadedChatTemplate> t = LoadChatTemplate(found, "");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::printf("[ gguf     ] %s: template from %s, bos '%s', eos '%s'\n", found.c_str(), t->origin.c_str(),
              t->bos_token.c_str(), t->eos_token.c_str());
  StatusOr<ChatTemplate> ct = ChatTemplate::FromString(t->source);
  ASSERT_TRUE(ct.ok()) << ct.status().ToString();
  ChatTemplateInputs in;
  in.messages = ojson::parse(R"([{"role":"user","content":"Hi"}])");
  in.add_generation_prompt = true;
  in.bos_token = t->bos_token;
  in.eos_token = t->eos_token;
  EXPECT_TRUE(ct->Render(in).ok());
}

}  // namespace
}  // namespace kvserve

// DetectToolCallFormat on the real templates of ../shared/assets/chat_templates and
// tests/data/chat_templates.
#include "toolcall/template_detect.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "base/testing/test_dependency.h"
#include "toolcall/parser_selection.h"

namespace kvserve::toolcall {
namespace {

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// File name -> expected parser ("" for none). Templates not listed here are only required
// not to crash; their detection is printed.
const std::map<std::string, std::string>& Expected() {
  static const std::map<std::string, std::string> expected = {
      // ../shared/assets/chat_templates
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "hermes"},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", "hermes"},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "deepseek_v3"},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "deepseek_v3"},
      {"google-gemma-2-2b-it.jinja", ""},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3_json"},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3_json"},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", "llama3_json"},
      {"microsoft-Phi-3.5-mini-instruct.jinja", ""},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral"},
      // tests/data/chat_templates
      {"chatml.jinja", ""},
      {"llama-2-chat.jinja", ""},
      {"ByteDance-Seed-Seed-OSS-36B-Instruct.jinja", ""},  // XML parameters: not supported
      {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", "command_r"},
      {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "command_r"},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "hermes"},
      {"Qwen-QwQ-32B.jinja", "hermes"},
      {"Qwen-Qwen3-0.6B.jinja", "hermes"},
      {"deepseek-ai-DeepSeek-V3.1.jinja", "deepseek_v3"},
      {"fireworks-ai-llama-3-firefunction-v2.jinja", ""},
      {"ibm-granite-granite-3.3-2B-Instruct.jinja", ""},
      {"meetkai-functionary-medium-v3.1.jinja", "functionary_v3"},
      {"meetkai-functionary-medium-v3.2.jinja", "functionary_v3"},
      {"mistralai-Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistral"},
      {"nvidia-NVIDIA-Nemotron-Nano-9B-v2.jinja", ""},
      {"openai-gpt-oss-120b.jinja", ""},
      {"unsloth-Devstral-Small-2507.jinja", "mistral"},
      {"ibm-granite-granite-4.0.jinja", "hermes"},
      {"mistralai-Ministral-3-14B-Reasoning-2512.jinja", "mistral"},
      {"zai-org-GLM-4.6.jinja", ""},                              // <arg_key> XML: not supported
      {"Qwen-Qwen3-Coder.jinja", ""},                             // XML parameters
      {"Qwen-Qwen3.5-4B.jinja", ""},                              // XML parameters
      {"nvidia-NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", ""},   // XML parameters
      {"MiniMaxAI-MiniMax-M2.jinja", ""},
      {"moonshotai-Kimi-K2-Instruct.jinja", ""},
      {"moonshotai-Kimi-K2-Thinking.jinja", ""},
      {"google-gemma-4-31B-it.jinja", ""},
      {"LiquidAI-LFM2-8B-A1B.jinja", ""},
      {"swiss-ai-Apertus-8B-Instruct.jinja", ""},
  };
  return expected;
}

const std::map<std::string, std::string>& ExpectedReasoning() {
  static const std::map<std::string, std::string> expected = {
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "deepseek_r1"},
      {"deepseek-ai-DeepSeek-V3.1.jinja", "deepseek_r1"},
      {"Qwen-Qwen3-0.6B.jinja", "qwen3"},
      {"Qwen-QwQ-32B.jinja", "qwen3"},
      {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "command_r"},
      {"mistralai-Ministral-3-14B-Reasoning-2512.jinja", "mistral"},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ""},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ""},
  };
  return expected;
}

void CheckFolder(const std::filesystem::path& dir, int* num_checked) {
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    std::string name = entry.path().filename().string();
    std::string source = ReadFile(entry.path());
    std::optional<std::string> format = DetectToolCallFormat(source);
    std::optional<std::string> reasoning = DetectReasoningFormat(source);
    auto it = Expected().find(name);
    if (it != Expected().end()) {
      EXPECT_EQ(format.value_or(""), it->second) << name;
      ++*num_checked;
    } else {
      std::printf("not in the table: %s -> %s\n", name.c_str(), format.value_or("(none)").c_str());
    }
    auto r = ExpectedReasoning().find(name);
    if (r != ExpectedReasoning().end()) {
      EXPECT_EQ(reasoning.value_or(""), r->second) << name;
    }
  }
}

TEST(TemplateDetectTest, SharedAssetTemplates) {
  std::filesystem::path dir = std::filesystem::path(KVSERVE_ASSETS_DIR) / "chat_templates";
  KVSERVE_SKIP_IF_ABSENT(std::filesystem::exists(dir), dir.string());
  int num_checked = 0;
  CheckFolder(dir, &num_checked);
  EXPECT_GE(num_checked, 10);
}

TEST(TemplateDetectTest, TestDataTemplates) {
  int num_checked = 0;
  CheckFolder(std::filesystem::path(KVSERVE_TESTDATA_DIR) / "chat_templates", &num_checked);
  EXPECT_GE(num_checked, 2);
}

TEST(TemplateDetectTest, Markers) {
  EXPECT_EQ(DetectToolCallFormat("{{ '<tool_call>\\n' + tool_call | tojson + '\\n</tool_call>' }}"), "hermes");
  EXPECT_EQ(DetectToolCallFormat("{{ '[TOOL_CALLS]' + calls }}"), "mistral");
  EXPECT_EQ(DetectToolCallFormat("<|START_ACTION|>{{ x }}<|END_ACTION|>"), "command_r");
  EXPECT_EQ(DetectToolCallFormat("{{ '>>>all\\n' + content }}"), "functionary_v3");
  EXPECT_EQ(DetectToolCallFormat("{{ '<function=' + name + '>' }}"), "functionary_v3");
  EXPECT_EQ(DetectToolCallFormat("{{ '<|python_tag|>' }}"), "llama3_json");
  EXPECT_EQ(DetectToolCallFormat("<｜tool▁calls▁begin｜>"), "deepseek_v3");
  EXPECT_EQ(DetectToolCallFormat("{{ messages }}"), std::nullopt);
  EXPECT_EQ(DetectToolCallFormat(""), std::nullopt);
}

}  // namespace
}  // namespace kvserve::toolcall

namespace kvserve::toolcall {
namespace {

TEST(ParserSelectionTest, FlagsAndDetection) {
  const std::string qwen = "{{ '<tool_call>\\n' }}{{ '<think>' }}";
  auto off = ResolveToolCallParser("", false, qwen);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(*off, nullptr);
  auto detected = ResolveToolCallParser("", true, qwen);
  ASSERT_TRUE(detected.ok());
  EXPECT_EQ((*detected)->name(), "hermes");
  auto named = ResolveToolCallParser("mistral", true, qwen);
  ASSERT_TRUE(named.ok());
  EXPECT_EQ((*named)->name(), "mistral");
  EXPECT_FALSE(ResolveToolCallParser("mistral", false, qwen).ok());
  EXPECT_FALSE(ResolveToolCallParser("nope", true, qwen).ok());
  auto undetectable = ResolveToolCallParser("", true, "{{ messages }}");
  ASSERT_FALSE(undetectable.ok());
  EXPECT_NE(undetectable.status().message().find("--tool-call-parser"), std::string::npos);

  auto none = ResolveReasoningParser("", qwen);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto reasoning = ResolveReasoningParser("auto", qwen);
  ASSERT_TRUE(reasoning.ok());
  EXPECT_EQ((*reasoning)->start_tag, "<think>");
  EXPECT_FALSE((*reasoning)->starts_in_reasoning);
  EXPECT_FALSE(ResolveReasoningParser("auto", "{{ messages }}").ok());
  EXPECT_TRUE(ResolveReasoningParser("deepseek_r1", "")->value().starts_in_reasoning);
}

}  // namespace
}  // namespace kvserve::toolcall

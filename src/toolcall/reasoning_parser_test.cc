#include "toolcall/reasoning_parser.h"

#include <random>

#include <gtest/gtest.h>

namespace kvserve::toolcall {
namespace {

ReasoningSplit Streamed(std::string_view text, const ReasoningParserOptions& options, const std::vector<size_t>& sizes) {
  ReasoningStream stream(options);
  std::vector<OutputDelta> deltas;
  size_t pos = 0;
  for (size_t i = 0; pos < text.size(); ++i) {
    size_t n = std::min(i < sizes.size() ? sizes[i] : text.size(), text.size() - pos);
    stream.Feed(text.substr(pos, n), &deltas);
    pos += n;
  }
  stream.Finish(&deltas);
  ReasoningSplit split;
  for (const OutputDelta& d : deltas) {
    EXPECT_FALSE(d.text.empty());
    if (d.kind == OutputDelta::Kind::kReasoning) {
      EXPECT_TRUE(split.content.empty()) << "reasoning after content";
      split.reasoning_content += d.text;
    } else {
      EXPECT_EQ(d.kind, OutputDelta::Kind::kContent);
      split.content += d.text;
    }
  }
  return split;
}

struct Case {
  const char* parser;
  bool prompt_opened;  // the prompt ended with the start tag
  std::string output;
  std::string reasoning;
  std::string content;
};

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      // DeepSeek R1: the template's generation prompt ends with "<think>\n".
      {"deepseek_r1", true, "Okay, the user asks 2+2.\nThat is 4.\n</think>\n\nThe answer is **4**.",
       "Okay, the user asks 2+2.\nThat is 4.", "The answer is **4**."},
      {"deepseek_r1", false, "<think>\nHmm.\n</think>\n\n4", "Hmm.", "4"},
      {"deepseek_r1", false, "Still thinking when max_tokens hit", "Still thinking when max_tokens hit", ""},
      {"deepseek_r1", true, "</think>Direct answer.", "", "Direct answer."},
      // Qwen3: the model opens the block itself; with enable_thinking=false there is none.
      {"qwen3", false, "<think>\nLet me think about 日本.\n</think>\n\n東京です。", "Let me think about 日本.", "東京です。"},
      {"qwen3", false, "No reasoning here.\n", "", "No reasoning here.\n"},
      {"qwen3", false, "  <thin", "", "  <thin"},
      {"qwen3", false, "<think>cut off", "cut off", ""},
      {"qwen3", true, "reasoning only</think>content <think> is text here", "reasoning only",
       "content <think> is text here"},
      {"qwen3", false, "", "", ""},
      {"command_r", false, "<|START_THINKING|>Plan: call the tool.<|END_THINKING|><|START_ACTION|>[]<|END_ACTION|>",
       "Plan: call the tool.", "<|START_ACTION|>[]<|END_ACTION|>"},
      {"mistral", false, "[THINK]Let me see: 2+2.[/THINK]\nThe answer is 4.[TOOL_CALLS]", "Let me see: 2+2.",
       "The answer is 4.[TOOL_CALLS]"},
  };
  return cases;
}

TEST(ReasoningParserTest, SplitsRecordedOutputs) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(std::string(c.parser) + ": " + c.output);
    auto options = ReasoningParserOptionsFor(c.parser);
    ASSERT_TRUE(options.ok());
    options->starts_in_reasoning = options->starts_in_reasoning || c.prompt_opened;
    ReasoningSplit split = SplitReasoning(c.output, *options);
    EXPECT_EQ(split.reasoning_content, c.reasoning);
    EXPECT_EQ(split.content, c.content);
  }
}

TEST(ReasoningParserTest, StreamingEqualsNonStreaming) {
  std::mt19937 rng(3);
  for (const Case& c : Cases()) {
    auto options = ReasoningParserOptionsFor(c.parser);
    ASSERT_TRUE(options.ok());
    options->starts_in_reasoning = options->starts_in_reasoning || c.prompt_opened;
    for (size_t n = 0; n <= c.output.size(); ++n) {  // every prefix: cut off anywhere
      std::string text = c.output.substr(0, n);
      ReasoningSplit whole = SplitReasoning(text, *options);
      for (int trial = 0; trial < 4; ++trial) {
        std::vector<size_t> sizes;
        std::uniform_int_distribution<size_t> size(1, trial == 0 ? 1 : 9);
        for (size_t total = 0; total < text.size();) sizes.push_back(size(rng)), total += sizes.back();
        ReasoningSplit streamed = Streamed(text, *options, sizes);
        ASSERT_EQ(streamed.reasoning_content, whole.reasoning_content) << text;
        ASSERT_EQ(streamed.content, whole.content) << text;
      }
    }
  }
}

TEST(ReasoningParserTest, ReasoningStreamsWhileThinking) {
  ReasoningStream stream(*ReasoningParserOptionsFor("deepseek_r1"));
  std::vector<OutputDelta> deltas;
  stream.Feed("\nFirst, ", &deltas);
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_EQ(deltas[0].text, "First,");
  stream.Feed("more.</th", &deltas);
  ASSERT_EQ(deltas.size(), 2u);
  EXPECT_EQ(deltas[1].text, " more.");
  stream.Feed("ink>Hi", &deltas);
  ASSERT_EQ(deltas.size(), 3u);
  EXPECT_EQ(deltas[2].kind, OutputDelta::Kind::kContent);
  EXPECT_EQ(deltas[2].text, "Hi");
}

TEST(ReasoningParserTest, NamesAndPrompt) {
  EXPECT_FALSE(ReasoningParserOptionsFor("o1").ok());
  EXPECT_TRUE(ReasoningParserOptionsFor("deepseek_r1")->starts_in_reasoning);
  ReasoningParserOptions qwen = *ReasoningParserOptionsFor("qwen3");
  EXPECT_TRUE(PromptOpensReasoning("<|im_start|>assistant\n<think>\n", qwen));
  EXPECT_FALSE(PromptOpensReasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n", qwen));
  EXPECT_FALSE(PromptOpensReasoning("<|im_start|>assistant\n", qwen));
}

}  // namespace
}  // namespace kvserve::toolcall

// Reasoning parsers (--reasoning-parser): split a reasoning model's output into
// `reasoning_content` (the <think>...</think> block) and `content`.
//
//   deepseek_r1  <think>...</think>; the output starts inside the block (R1's generation prompt
//                ends with "<think>\n"), so an output without </think> is all reasoning
//   qwen3        <think>...</think> when the output opens it (or the prompt did: see
//                PromptOpensReasoning); otherwise all content
//   command_r    <|START_THINKING|>...<|END_THINKING|> (Command R7B)
//   mistral      [THINK]...[/THINK] (Magistral, Ministral 3 reasoning)
//
// The reasoning is trimmed of surrounding whitespace, and so is the start of the content
// after the end tag; an output with no reasoning block is content exactly as written.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "toolcall/output_delta.h"
#include "toolcall/tool_call_stream.h"

namespace kvserve::toolcall {

struct ReasoningParserOptions {
  std::string start_tag = "<think>";
  std::string end_tag = "</think>";
  // The prompt already opened the block: the output starts inside it (a start tag at the
  // very beginning of the output is still skipped).
  bool starts_in_reasoning = false;
};

const std::vector<std::string>& ReasoningParserNames();
// InvalidArgument naming the choices for an unknown name.
StatusOr<ReasoningParserOptions> ReasoningParserOptionsFor(std::string_view name);

// True when the rendered prompt ends (before trailing whitespace) with the start tag, so the
// output begins inside the block (R1, Qwen3 with thinking, ...). The server sets
// starts_in_reasoning from this.
bool PromptOpensReasoning(std::string_view prompt, const ReasoningParserOptions& options);

struct ReasoningSplit {
  std::string reasoning_content;
  std::string content;
};
ReasoningSplit SplitReasoning(std::string_view text, const ReasoningParserOptions& options);

// The streaming split: kReasoning and kContent deltas whose concatenations equal
// SplitReasoning of the whole text. Holds back only a possible tag prefix, whitespace and an
// incomplete UTF-8 sequence. Single thread.
class ReasoningStream {
 public:
  explicit ReasoningStream(ReasoningParserOptions options) : options_(std::move(options)) {}

  void Feed(std::string_view piece, std::vector<OutputDelta>* out);
  void Finish(std::vector<OutputDelta>* out);

 private:
  enum class Mode { kDeciding, kReasoning, kContent };
  void Run(bool final, std::vector<OutputDelta>* out);

  ReasoningParserOptions options_;
  std::string text_;
  Mode mode_ = Mode::kDeciding;
  size_t scan_pos_ = 0;  // text_ before this is in reasoning_ or content_
  HeldText reasoning_{/*trim_left=*/true};
  HeldText content_{/*trim_left=*/false};
  bool finished_ = false;
};

}  // namespace kvserve::toolcall

// The whole output side of a chat completion: reasoning split (optional), then tool calls
// (optional), streaming and not. This is what the server calls per choice.
//
//   ChatOutputOptions options;
//   options.tool_call_parser = parser.get();   // null when the request has no tools or
//                                              // tool_choice is "none"; the forced parsers
//                                              // (forced_tool_call_parser.h) for "required"
//                                              // and a named function
//   options.reasoning = reasoning_options;     // nullopt without --reasoning-parser;
//   options.reasoning->starts_in_reasoning =   // the prompt decides where the output starts
//       PromptOpensReasoning(prompt, *options.reasoning);
//   ToolCallIdGenerator ids = ToolCallIdGenerator::FromRandomDevice();
//
//   non-streaming:  ChatOutput message = ParseChatOutput(text, options, ids);
//   streaming:      ChatOutputStream stream(options, &ids);
//                   stream.Feed(piece, &deltas) per detokenized piece, stream.Finish(&deltas)
//                   at the end; each delta -> OpenAiDeltaJson(delta) in a chunk.
//
// The concatenation of the stream's deltas equals ParseChatOutput of the whole text.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "toolcall/output_delta.h"
#include "toolcall/reasoning_parser.h"
#include "toolcall/tool_call_parser.h"
#include "toolcall/tool_call_stream.h"

namespace kvserve::toolcall {

struct ChatOutputOptions {
  const ToolCallParser* tool_call_parser = nullptr;  // not owned; null: content only
  std::optional<ReasoningParserOptions> reasoning;    // nullopt: no reasoning split
};

ChatOutput ParseChatOutput(std::string_view text, const ChatOutputOptions& options, ToolCallIdGenerator& ids);

// One choice's stream. Single thread; the parser and `ids` must outlive it.
class ChatOutputStream {
 public:
  ChatOutputStream(ChatOutputOptions options, ToolCallIdGenerator* ids);

  void Feed(std::string_view piece, std::vector<OutputDelta>* out);
  void Finish(std::vector<OutputDelta>* out);

  // For finish_reason "tool_calls".
  int num_tool_calls() const { return tool_calls_ ? tool_calls_->num_tool_calls() : 0; }

 private:
  // Content deltas of the reasoning stage go on to the tool-call stage.
  void Forward(std::vector<OutputDelta>& stage, bool final, std::vector<OutputDelta>* out);

  ChatOutputOptions options_;
  std::optional<ReasoningStream> reasoning_;
  std::optional<ToolCallStream> tool_calls_;
  HeldText plain_content_;  // neither stage: content as written
};

}  // namespace kvserve::toolcall

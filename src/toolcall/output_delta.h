// The pieces a streamed chat completion is made of, in OpenAI's terms, and their sum.
//
// A tool call streams as OpenAI streams it: one kToolCallStart (index, id, name; the chunk's
// "type": "function" and "arguments": "") and then kToolCallArguments fragments of the same
// index whose concatenation is the arguments string. Content and reasoning deltas concatenate
// to `content` and `reasoning_content`.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "toolcall/tool_call_parser.h"

namespace kvserve::toolcall {

struct OutputDelta {
  enum class Kind { kContent, kReasoning, kToolCallStart, kToolCallArguments };
  Kind kind = Kind::kContent;
  std::string text;         // content, reasoning or an arguments fragment
  int tool_call_index = -1; // tool call kinds: 0, 1, ... in order of appearance
  std::string id;           // kToolCallStart
  std::string name;         // kToolCallStart

  static OutputDelta Content(std::string text) { return {Kind::kContent, std::move(text), -1, {}, {}}; }
  static OutputDelta Reasoning(std::string text) { return {Kind::kReasoning, std::move(text), -1, {}, {}}; }
};

// A whole assistant message: what the deltas of one output add up to.
struct ChatOutput {
  std::string reasoning_content;  // "" when none (the server omits the field or sends null)
  std::string content;            // "" when none
  std::vector<ToolCall> tool_calls;
};

// Adds one delta to `message` (a tool call's start creates it; fragments append).
void AccumulateDelta(const OutputDelta& delta, ChatOutput* message);

// The `delta` object of one chat.completion.chunk choice for this piece:
// {"content": ...}, {"reasoning_content": ...} or {"tool_calls": [{"index": i, ...}]}.
nlohmann::ordered_json OpenAiDeltaJson(const OutputDelta& delta);

// The message object of a non-streaming response: role, content (null when empty and there
// are tool calls), reasoning_content when present, tool_calls when present.
nlohmann::ordered_json OpenAiMessageJson(const ChatOutput& message);

}  // namespace kvserve::toolcall

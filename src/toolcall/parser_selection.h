// Server start-up: the flags and the model's chat template -> the parsers every request uses.
//
//   --enable-auto-tool-choice           tool_choice "auto" (and a request's tools) allowed
//   --tool-call-parser NAME             hermes, llama3_json, mistral, deepseek_v3,
//                                       functionary_v3, command_r; without it, with
//                                       --enable-auto-tool-choice, detected from the template
//   --reasoning-parser NAME             deepseek_r1, qwen3, command_r, mistral, or "auto" (from the
//                                       template)
//
// Per request (see chat_output_parser.h): tool_choice "none" or no tools -> no tool parser;
// "auto" -> the server's parser; "required" / a named function -> forced_tool_call_parser.h.
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "base/status.h"
#include "toolcall/reasoning_parser.h"
#include "toolcall/tool_call_parser.h"

namespace kvserve::toolcall {

// nullptr when tool calls are off (no --enable-auto-tool-choice and no --tool-call-parser).
// InvalidArgument for an unknown name, for --tool-call-parser without
// --enable-auto-tool-choice (vLLM's rule), and when detection finds nothing (the message says
// to pass --tool-call-parser).
StatusOr<std::unique_ptr<ToolCallParser>> ResolveToolCallParser(std::string_view tool_call_parser_flag,
                                                                 bool enable_auto_tool_choice,
                                                                 std::string_view template_source);

// nullopt when the flag is empty; "auto" detects from the template (InvalidArgument when it
// shows no thinking block).
StatusOr<std::optional<ReasoningParserOptions>> ResolveReasoningParser(std::string_view reasoning_parser_flag,
                                                                       std::string_view template_source);

}  // namespace kvserve::toolcall

#include "toolcall/parser_selection.h"

#include "toolcall/template_detect.h"

namespace kvserve::toolcall {

StatusOr<std::unique_ptr<ToolCallParser>> ResolveToolCallParser(std::string_view tool_call_parser_flag,
                                                                 bool enable_auto_tool_choice,
                                                                 std::string_view template_source) {
  if (!tool_call_parser_flag.empty()) {
    if (!enable_auto_tool_choice) {
      return InvalidArgumentError("--tool-call-parser needs --enable-auto-tool-choice");
    }
    return CreateToolCallParser(tool_call_parser_flag);
  }
  if (!enable_auto_tool_choice) return std::unique_ptr<ToolCallParser>();
  std::optional<std::string> detected = DetectToolCallFormat(template_source);
  if (!detected) {
    std::string choices;
    for (const std::string& n : ToolCallParserNames()) choices += (choices.empty() ? "" : ", ") + n;
    return InvalidArgumentError(
        "--enable-auto-tool-choice: the chat template shows no tool-call format kvserve parses; pass "
        "--tool-call-parser NAME (one of: " + choices + ")");
  }
  return CreateToolCallParser(*detected);
}

StatusOr<std::optional<ReasoningParserOptions>> ResolveReasoningParser(std::string_view reasoning_parser_flag,
                                                                       std::string_view template_source) {
  if (reasoning_parser_flag.empty()) return std::optional<ReasoningParserOptions>();
  std::string name(reasoning_parser_flag);
  if (name == "auto") {
    std::optional<std::string> detected = DetectReasoningFormat(template_source);
    if (!detected) {
      return InvalidArgumentError("--reasoning-parser auto: the chat template shows no thinking block; name one of "
                                  "deepseek_r1, qwen3, command_r, mistral");
    }
    name = *detected;
  }
  KV_ASSIGN_OR_RETURN(ReasoningParserOptions options, ReasoningParserOptionsFor(name));
  return std::optional<ReasoningParserOptions>(std::move(options));
}

}  // namespace kvserve::toolcall

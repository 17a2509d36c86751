// Choosing the parsers from a model's chat template (--enable-auto-tool-choice without
// --tool-call-parser, and --reasoning-parser auto): the template shows how the model writes a
// call back into the prompt, which is how it was trained to write one.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kvserve::toolcall {

// The --tool-call-parser name for the template's call syntax, or nullopt when the template
// shows none (or one we do not parse, e.g. the XML parameters of Qwen3-Coder and Seed-OSS):
//   <｜tool▁calls▁begin｜> -> deepseek_v3   [TOOL_CALLS] -> mistral
//   <|START_ACTION|>, Action: ```json -> command_r   <tool_call> -> hermes
//   >>> / <function= -> functionary_v3   <|python_tag|>, ipython -> llama3_json
std::optional<std::string> DetectToolCallFormat(std::string_view template_source);

// The --reasoning-parser name when the template writes a thinking block: deepseek_r1 for
// DeepSeek's templates, command_r for <|START_THINKING|>, mistral for [THINK], qwen3 for
// other <think> templates.
std::optional<std::string> DetectReasoningFormat(std::string_view template_source);

}  // namespace kvserve::toolcall

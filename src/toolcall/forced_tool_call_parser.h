// Tool calls from outputs whose shape the structured-output constraint forced, for
// tool_choice "required" and tool_choice {"type": "function", "function": {"name": ...}}
// (vLLM's shapes). The model's own call syntax plays no part there, so these replace the
// format parser (--tool-call-parser) for such requests. Immutable and thread-safe like every
// ToolCallParser; stream them with ToolCallStream / ChatOutputStream.
#pragma once

#include <memory>
#include <string>

#include "toolcall/tool_call_parser.h"

namespace kvserve::toolcall {

// The output is [{"name": ..., "parameters": {...}}, ...] (at least one element; "arguments"
// is accepted for "parameters"). `id_style`: the model's (kMistral for Mistral templates).
std::unique_ptr<ToolCallParser> CreateRequiredToolCallParser(ToolCallIdStyle id_style = ToolCallIdStyle::kOpenAi);

// The output is the arguments object of `function_name`.
std::unique_ptr<ToolCallParser> CreateNamedToolCallParser(std::string function_name,
                                                          ToolCallIdStyle id_style = ToolCallIdStyle::kOpenAi);

}  // namespace kvserve::toolcall

#include "toolcall/template_detect.h"

namespace kvserve::toolcall {

namespace {

bool Has(std::string_view text, std::string_view marker) { return text.find(marker) != std::string_view::npos; }

bool HasDeepSeekCalls(std::string_view s) {
  return Has(s, "<｜tool▁calls▁begin｜>") || Has(s, "<｜tool▁call▁begin｜>") || Has(s, "<｜tool_calls_begin｜>");
}

}  // namespace

std::optional<std::string> DetectToolCallFormat(std::string_view s) {
  if (HasDeepSeekCalls(s)) return "deepseek_v3";
  if (Has(s, "[TOOL_CALLS]")) return "mistral";
  if (Has(s, "<|START_ACTION|>")) return "command_r";
  if (Has(s, "Action:") && Has(s, "```json") && Has(s, "tool_name")) return "command_r";
  // XML parameters (Qwen3-Coder, Qwen3.5, Nemotron 3, Seed-OSS: <function=NAME><parameter=K>): a
  // format we do not parse, whatever else the template shows.
  if (Has(s, "<parameter=")) return std::nullopt;
  if (Has(s, "<arg_key>")) return std::nullopt;  // GLM 4.5/4.6: <tool_call>NAME<arg_key>...: not hermes
  if (Has(s, "<tool_call>")) return "hermes";
  if (Has(s, ">>>") && (Has(s, "all\\n") || Has(s, ">>>all") || Has(s, "'all'"))) return "functionary_v3";
  if (Has(s, "<function=")) return "functionary_v3";
  if (Has(s, "<|python_tag|>")) return "llama3_json";
  if (Has(s, "ipython") && Has(s, "\"parameters\"")) return "llama3_json";
  return std::nullopt;
}

std::optional<std::string> DetectReasoningFormat(std::string_view s) {
  if (Has(s, "<|START_THINKING|>")) return "command_r";
  if (Has(s, "[THINK]")) return "mistral";
  if (!Has(s, "<think>") && !Has(s, "</think>")) return std::nullopt;
  if (HasDeepSeekCalls(s) || Has(s, "<｜Assistant｜>")) return "deepseek_r1";
  return "qwen3";
}

}  // namespace kvserve::toolcall

// hermes: Hermes 2 Pro / Hermes 3 and Qwen 2.5 / Qwen 3 (vLLM's "hermes").
//
//   I'll check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n
//   <tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>
//
// Hermes 2 Pro's Python-dict spelling ({'name': 'f', 'arguments': {'a': True}}) is read too.
// The JSON is located by its brackets, so "</tool_call>" inside an argument string does not
// end the call. A call that does not parse is content up to its closing tag.
#include "toolcall/formats.h"

namespace kvserve::toolcall {

namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

// The text from `pos` (the open tag) to the first close tag at or after `search_from` is
// content; with no close tag yet the call is unterminated.
ScanStep MalformedUpToClose(std::string_view text, size_t search_from) {
  size_t close = text.find(kClose, search_from);
  if (close == std::string_view::npos) return ScanStep::NeedMore();
  return ScanStep::Malformed(close + kClose.size());
}

ScanStep ReadCall(std::string_view text, size_t pos) {
  size_t body = pos + kOpen.size();
  size_t p = SkipSpace(text, body);
  if (p == text.size()) return ScanStep::NeedMore();
  if (text[p] != '{') return MalformedUpToClose(text, body);
  // Hermes 2 Pro often writes a Python dict: {'arguments': {...}, 'name': '...'}.
  size_t first_key = SkipSpace(text, p + 1);
  if (first_key == text.size()) return ScanStep::NeedMore();
  bool python = text[first_key] == '\'';
  JsonScan json = ScanJsonValue(text, p, python);
  if (json.status == JsonScanStatus::kIncomplete) return ScanStep::NeedMore();
  if (json.status == JsonScanStatus::kInvalid) return MalformedUpToClose(text, body);
  std::string_view object_text = text.substr(p, json.end - p);
  std::optional<Json> value = python ? ParsePythonLiteral(object_text) : ParseJson(object_text);
  std::optional<ParsedCall> call;
  if (value) call = CallFromObject(*value, "name", {"arguments", "parameters"});
  if (!call) return MalformedUpToClose(text, json.end);
  size_t q = SkipSpace(text, json.end);
  if (StartsWithAt(text, q, kClose)) return ScanStep::Calls(q + kClose.size(), {std::move(*call)});
  if (q == text.size() || IsProperPrefixAt(text, q, kClose)) return ScanStep::NeedMore();
  return MalformedUpToClose(text, json.end);
}

}  // namespace

std::unique_ptr<ToolCallParser> NewHermesParser() {
  MarkerScanSpec spec;
  spec.markers = {kOpen};
  spec.at_marker = [](std::string_view text, size_t pos, size_t, bool) { return ReadCall(text, pos); };
  return std::make_unique<MarkerToolCallParser>("hermes", std::move(spec));
}

}  // namespace kvserve::toolcall

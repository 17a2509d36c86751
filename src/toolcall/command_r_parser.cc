// command_r: Cohere Command-R / Command-R+ and Command R7B (llama.cpp's COMMAND_R7B).
//
//   Command-R(+):  Plan: I will search.\nAction: ```json\n[\n  {"tool_name": "internet_search",
//                  "parameters": {"query": "..."}}\n]\n```
//   Command R7B:   <|START_THINKING|>...<|END_THINKING|><|START_ACTION|>[{"tool_call_id": "0",
//                  "tool_name": "get_weather", "parameters": {"city": "Paris"}}]<|END_ACTION|>
//                  <|START_RESPONSE|>text<|END_RESPONSE|>
//
// The response markers are dropped (their text is content). The thinking block is the
// reasoning parser's ("command_r": <|START_THINKING|>/<|END_THINKING|>). The model's
// tool_call_id is not kept: ids are ours, as for every format.
#include "toolcall/formats.h"

namespace kvserve::toolcall {

namespace {

constexpr std::string_view kStartAction = "<|START_ACTION|>";
constexpr std::string_view kEndAction = "<|END_ACTION|>";
constexpr std::string_view kAction = "Action:";
constexpr std::string_view kStartResponse = "<|START_RESPONSE|>";
constexpr std::string_view kEndResponse = "<|END_RESPONSE|>";
constexpr std::string_view kFence = "```";

// A JSON list (or one object) of {"tool_name": ..., "parameters": {...}} at text[p], then
// `close`.
ScanStep ReadActions(std::string_view text, size_t p, std::string_view close) {
  p = SkipSpace(text, p);
  if (p == text.size()) return ScanStep::NeedMore();
  if (text[p] != '[' && text[p] != '{') return ScanStep::RestIsContent();
  JsonScan json = ScanJsonValue(text, p);
  if (json.status == JsonScanStatus::kIncomplete) return ScanStep::NeedMore();
  if (json.status == JsonScanStatus::kInvalid) return ScanStep::RestIsContent();
  std::optional<Json> value = ParseJson(text.substr(p, json.end - p));
  if (!value) return ScanStep::RestIsContent();
  Json list = value->is_array() ? *value : Json::array({*value});
  if (list.empty()) return ScanStep::RestIsContent();
  std::vector<ParsedCall> calls;
  for (const Json& element : list) {
    std::optional<ParsedCall> call = CallFromObject(element, "tool_name", {"parameters", "arguments"});
    if (!call) call = CallFromObject(element, "name", {"parameters", "arguments"});
    if (!call) return ScanStep::RestIsContent();
    calls.push_back(std::move(*call));
  }
  size_t s = SkipSpace(text, json.end);
  if (s == text.size() || IsProperPrefixAt(text, s, close)) return ScanStep::NeedMore();
  if (!StartsWithAt(text, s, close)) return ScanStep::RestIsContent();
  return ScanStep::Calls(s + close.size(), std::move(calls));
}

ScanStep AtMarker(std::string_view text, size_t pos, size_t index) {
  switch (index) {
    case 0:
      return ReadActions(text, pos + kStartAction.size(), kEndAction);
    case 1: {  // Action: ```json [...] ```
      size_t after = pos + kAction.size();
      size_t p = SkipSpace(text, after);
      if (p == text.size() || IsProperPrefixAt(text, p, kFence)) return ScanStep::NeedMore();
      if (!StartsWithAt(text, p, kFence)) return ScanStep::Malformed(after);  // "Action:" in prose
      p += kFence.size();
      if (IsProperPrefixAt(text, p, "json")) return ScanStep::NeedMore();
      if (StartsWithAt(text, p, "json")) p += 4;
      return ReadActions(text, p, kFence);
    }
    case 2:
      return ScanStep::Calls(pos + kStartResponse.size(), {});
    default:
      return ScanStep::Calls(pos + kEndResponse.size(), {});
  }
}

}  // namespace

std::unique_ptr<ToolCallParser> NewCommandRParser() {
  MarkerScanSpec spec;
  spec.markers = {kStartAction, kAction, kStartResponse, kEndResponse};
  spec.at_marker = [](std::string_view text, size_t pos, size_t index, bool) { return AtMarker(text, pos, index); };
  return std::make_unique<MarkerToolCallParser>("command_r", std::move(spec));
}

}  // namespace kvserve::toolcall

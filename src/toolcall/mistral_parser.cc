// mistral: Mistral 7B v0.3, Mistral Nemo, Mistral Small / Large, Magistral (vLLM's "mistral").
//
//   [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, {...}]   (tokenizer v3)
//   [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}     (v11 and later)
//   [TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Paris"}               (v13)
//   [TOOL_CALLS]get_weather{"city": "Paris"}      ([ARGS] lost to skip_special_tokens, as in
//                                                  vLLM's tests)
//
// Ids are 9 alphanumerics: Mistral's chat templates refuse any other id in the history. A JSON
// list counts only when every element is a call; otherwise the list is content.
#include "toolcall/formats.h"

namespace kvserve::toolcall {

namespace {

constexpr std::string_view kToolCalls = "[TOOL_CALLS]";
constexpr std::string_view kArgs = "[ARGS]";
constexpr std::string_view kCallId = "[CALL_ID]";

ScanStep ReadJsonCalls(std::string_view text, size_t p) {
  JsonScan json = ScanJsonValue(text, p);
  if (json.status == JsonScanStatus::kIncomplete) return ScanStep::NeedMore();
  if (json.status == JsonScanStatus::kInvalid) return ScanStep::RestIsContent();
  std::optional<Json> value = ParseJson(text.substr(p, json.end - p));
  if (!value) return ScanStep::Malformed(json.end);
  std::vector<ParsedCall> calls;
  if (value->is_object()) {
    std::optional<ParsedCall> call = CallFromObject(*value, "name", {"arguments", "parameters"});
    if (!call) return ScanStep::Malformed(json.end);
    calls.push_back(std::move(*call));
  } else {
    if (value->empty()) return ScanStep::Malformed(json.end);
    for (const Json& element : *value) {
      std::optional<ParsedCall> call = CallFromObject(element, "name", {"arguments", "parameters"});
      if (!call) return ScanStep::Malformed(json.end);
      calls.push_back(std::move(*call));
    }
  }
  return ScanStep::Calls(json.end, std::move(calls));
}

// name[ARGS]{...} or name[CALL_ID]id[ARGS]{...} at text[p].
ScanStep ReadNamedCall(std::string_view text, size_t marker_end, size_t p) {
  size_t q = p;
  while (q < text.size() && IsNameChar(text[q])) ++q;
  if (q == text.size()) return ScanStep::NeedMore();
  if (q == p) return ScanStep::Malformed(marker_end);  // a stray [TOOL_CALLS]
  std::string name(text.substr(p, q - p));
  if (StartsWithAt(text, q, kCallId)) {
    q += kCallId.size();
    while (q < text.size() && IsWordChar(text[q])) ++q;
    if (q == text.size()) return ScanStep::NeedMore();
  } else if (IsProperPrefixAt(text, q, kCallId)) {
    return ScanStep::NeedMore();
  }
  size_t a = q;
  if (IsProperPrefixAt(text, q, kArgs)) return ScanStep::NeedMore();
  if (StartsWithAt(text, q, kArgs)) {
    a = SkipSpace(text, q + kArgs.size());
  } else if (text[q] != '{') {  // [ARGS] may be missing when special tokens were skipped
    return ScanStep::RestIsContent();
  }
  if (a == text.size()) return ScanStep::NeedMore();
  if (text[a] != '{') return ScanStep::RestIsContent();
  JsonScan json = ScanJsonValue(text, a);
  if (json.status == JsonScanStatus::kIncomplete) return ScanStep::NeedMore();
  if (json.status == JsonScanStatus::kInvalid) return ScanStep::RestIsContent();
  std::optional<Json> args = ParseJson(text.substr(a, json.end - a));
  if (!args || !args->is_object()) return ScanStep::RestIsContent();
  return ScanStep::Calls(json.end, {ParsedCall{std::move(name), CompactJson(*args)}});
}

ScanStep AtToolCalls(std::string_view text, size_t pos) {
  size_t marker_end = pos + kToolCalls.size();
  size_t p = SkipSpace(text, marker_end);
  if (p == text.size()) return ScanStep::NeedMore();
  if (text[p] == '[' || text[p] == '{') return ReadJsonCalls(text, p);
  return ReadNamedCall(text, marker_end, p);
}

}  // namespace

std::unique_ptr<ToolCallParser> NewMistralParser() {
  MarkerScanSpec spec;
  spec.markers = {kToolCalls};
  spec.at_marker = [](std::string_view text, size_t pos, size_t, bool) { return AtToolCalls(text, pos); };
  return std::make_unique<MarkerToolCallParser>("mistral", std::move(spec), ToolCallIdStyle::kMistral);
}

}  // namespace kvserve::toolcall

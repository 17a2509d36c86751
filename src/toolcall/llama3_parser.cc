// llama3_json: Llama 3.1 / 3.2 / 3.3 (vLLM's "llama3_json").
//
//   {"name": "get_weather", "parameters": {"city": "Paris"}}            (JSON tool calling)
//   {"type": "function", "name": "a", "parameters": {...}}; {"name": "b", "parameters": {...}}
//   Here is the result: {"name": "search", "parameters": {}} Anything else?
//   <|python_tag|>brave_search.call(query="weather in Paris")           (built-in tools)
//   <|python_tag|>{"name": "get_weather", "parameters": {...}}
//   <|python_tag|>import math\nprint(math.pi)                           (code interpreter)
//
// A call is an object with a "name" string and a "parameters" (or "arguments") object; other
// JSON stays content ({"name": "Bob"} is an answer, not a call). At the start of the output any
// object is tried; later in the text only one that opens with {"name" or {"type", so that code
// with braces streams without waiting. Calls may follow one another separated by ';' or
// whitespace. Raw code after <|python_tag|> becomes a call of "python" with {"code": ...}, as
// llama.cpp names it. <|python_tag|> must reach the text: the detokenizer must keep special
// tokens.
#include <algorithm>
#include <iterator>

#include "toolcall/formats.h"

namespace kvserve::toolcall {

namespace {

constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMarkers[] = {kPythonTag, "{\"name\"", "{\"type\"", "{ \"name\"", "{ \"type\""};
constexpr int kStateAfterCall = kFirstFormatState;

// One JSON call object at text[p] ('{'): a call, more text needed, or content.
ScanStep ReadJsonCall(std::string_view text, size_t p) {
  JsonScan json = ScanJsonValue(text, p);
  if (json.status == JsonScanStatus::kIncomplete) return ScanStep::NeedMore();
  if (json.status == JsonScanStatus::kInvalid) return ScanStep::RestIsContent();
  std::optional<Json> value = ParseJson(text.substr(p, json.end - p));
  std::optional<ParsedCall> call;
  if (value) call = CallFromObject(*value, "name", {"parameters", "arguments"}, /*require_arguments=*/true);
  if (!call) return ScanStep::Malformed(json.end);
  return ScanStep::Calls(json.end, {std::move(*call)}, kStateAfterCall);
}

ScanStep AtState(std::string_view text, size_t pos, int state) {
  size_t p = SkipSpace(text, pos);
  if (p == text.size()) return ScanStep::NeedMore();
  if (state == kStateStart) {
    if (text[p] != '{') return ScanStep::Leave();
    ScanStep step = ReadJsonCall(text, p);
    if (step.status == ScanStep::Status::kMalformed) step.end = std::max(step.end, pos + 1);
    return step;
  }
  // kStateAfterCall: another call, or back to content.
  if (text[p] == ';') {
    size_t q = SkipSpace(text, p + 1);
    if (q == text.size()) return ScanStep::NeedMore();
    if (text[q] == '{') {
      ScanStep step = ReadJsonCall(text, q);
      if (step.status == ScanStep::Status::kCalls || step.status == ScanStep::Status::kNeedMore) return step;
    }
    return ScanStep::Leave();
  }
  if (text[p] == '{') {
    ScanStep step = ReadJsonCall(text, p);
    if (step.status == ScanStep::Status::kCalls || step.status == ScanStep::Status::kNeedMore) return step;
  }
  return ScanStep::Leave();
}

ScanStep AtPythonTag(std::string_view text, size_t pos, bool final) {
  size_t p = SkipSpace(text, pos + kPythonTag.size());
  if (p == text.size()) return ScanStep::NeedMore();
  if (text[p] == '{') {
    ScanStep step = ReadJsonCall(text, p);
    if (step.status != ScanStep::Status::kMalformed) return step;
    return ScanStep::RestIsContent();
  }
  // name.call(key=value, ...)
  size_t q = p;
  while (q < text.size() && IsWordChar(text[q])) ++q;
  constexpr std::string_view kCall = ".call(";
  if (q > p && StartsWithAt(text, q, kCall)) {
    PyCallArgs args = ParsePythonKwargs(text, q + kCall.size());
    if (args.status == PyCallStatus::kIncomplete) return ScanStep::NeedMore();
    if (args.status == PyCallStatus::kOk) {
      return ScanStep::Calls(args.end, {ParsedCall{std::string(text.substr(p, q - p)), CompactJson(args.arguments)}},
                             kStateAfterCall);
    }
  }
  // Raw code: everything to the end of the output.
  if (!final) return ScanStep::NeedMore();
  std::string_view code = text.substr(p);
  while (!code.empty() && (code.back() == ' ' || code.back() == '\n' || code.back() == '\t' || code.back() == '\r')) {
    code.remove_suffix(1);
  }
  Json args = Json::object();
  args["code"] = std::string(code);
  return ScanStep::Calls(text.size(), {ParsedCall{"python", CompactJson(args)}}, kStateAfterCall);
}

}  // namespace

std::unique_ptr<ToolCallParser> NewLlama3JsonParser() {
  MarkerScanSpec spec;
  spec.markers.assign(std::begin(kMarkers), std::end(kMarkers));
  spec.at_marker = [](std::string_view text, size_t pos, size_t index, bool final) {
    if (index == 0) return AtPythonTag(text, pos, final);
    ScanStep step = ReadJsonCall(text, pos);
    // A brace that does not open a valid object: only the brace is content here.
    if (step.status == ScanStep::Status::kRestIsContent) return ScanStep::Malformed(pos + 1);
    return step;
  };
  spec.at_state = [](std::string_view text, size_t pos, int state, bool) { return AtState(text, pos, state); };
  return std::make_unique<MarkerToolCallParser>("llama3_json", std::move(spec));
}

}  // namespace kvserve::toolcall

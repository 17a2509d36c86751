// functionary_v3: MeetKai Functionary v3.1 and v3.2 (llama.cpp's FUNCTIONARY_V3_1_LLAMA_3_1 and
// FUNCTIONARY_V3_2; vLLM has no parser for them).
//
//   v3.2 (the generation prompt ends with ">>>"):
//     all\nLet me check.>>>get_weather\n{"city": "Paris"}>>>get_time\n{}
//     get_weather\n{"city": "Paris"}                     (a call straight away)
//     python\nimport math\nprint(math.pi)                (raw code for the python tool)
//   v3.1 (Llama 3.1 based):
//     <function=get_weather>{"city": "Paris"}</function>
//     <|python_tag|>import math\nprint(math.pi)
//
// "all" is the text recipient: what follows it up to the next ">>>" is content. Raw code
// becomes a call of "python" with {"code": ...}. A first line that is not "NAME\n" is content
// (the model wrote plain text).
#include "toolcall/formats.h"

namespace kvserve::toolcall {

namespace {

constexpr std::string_view kRecipient = ">>>";
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

ParsedCall PythonCall(std::string_view code) {
  while (!code.empty() && (code.back() == ' ' || code.back() == '\n' || code.back() == '\t' || code.back() == '\r')) {
    code.remove_suffix(1);
  }
  Json args = Json::object();
  args["code"] = std::string(code);
  return ParsedCall{"python", CompactJson(args)};
}

// A JSON object of arguments at text[p] for `name`; `close` (may be empty) must follow.
ScanStep ReadArguments(std::string_view text, size_t p, std::string name, std::string_view close) {
  p = SkipSpace(text, p);
  if (p == text.size()) return ScanStep::NeedMore();
  if (text[p] != '{') return ScanStep::RestIsContent();
  JsonScan json = ScanJsonValue(text, p);
  if (json.status == JsonScanStatus::kIncomplete) return ScanStep::NeedMore();
  if (json.status == JsonScanStatus::kInvalid) return ScanStep::RestIsContent();
  std::optional<Json> args = ParseJson(text.substr(p, json.end - p));
  if (!args || !args->is_object()) return ScanStep::RestIsContent();
  size_t end = json.end;
  if (!close.empty()) {
    size_t s = SkipSpace(text, end);
    if (s == text.size() || IsProperPrefixAt(text, s, close)) return ScanStep::NeedMore();
    if (!StartsWithAt(text, s, close)) return ScanStep::RestIsContent();
    end = s + close.size();
  }
  return ScanStep::Calls(end, {ParsedCall{std::move(name), CompactJson(*args)}});
}

// "NAME\n..." at text[p]. at_start: the output's first line (no ">>>" before it).
ScanStep ReadRecipient(std::string_view text, size_t p, bool at_start, bool final) {
  size_t q = p;
  while (q < text.size() && IsWordChar(text[q])) ++q;
  if (q == text.size()) return final ? ScanStep::RestIsContent() : ScanStep::NeedMore();
  if (q == p || text[q] != '\n') {
    if (at_start) return ScanStep::Leave();
    return ScanStep::Malformed(p);  // the ">>>" is content
  }
  std::string name(text.substr(p, q - p));
  size_t r = q + 1;
  if (name == "all") return ScanStep::Calls(r, {});  // text follows: drop the header
  size_t s = SkipSpace(text, r);
  if (s == text.size()) return ScanStep::NeedMore();
  if (name == "python" && text[s] != '{') {
    size_t next = text.find(kRecipient, r);
    if (next == std::string_view::npos) {
      if (!final) return ScanStep::NeedMore();
      next = text.size();
    }
    return ScanStep::Calls(next, {PythonCall(text.substr(r, next - r))});
  }
  if (text[s] != '{') return at_start ? ScanStep::Leave() : ScanStep::Malformed(p);  // plain text
  return ReadArguments(text, s, std::move(name), "");
}

ScanStep AtStart(std::string_view text, size_t pos, bool final) {
  if (IsProperPrefixAt(text, pos, kRecipient)) return final ? ScanStep::Leave() : ScanStep::NeedMore();
  size_t p = StartsWithAt(text, pos, kRecipient) ? pos + kRecipient.size() : pos;
  if (p == text.size()) return final ? ScanStep::RestIsContent() : ScanStep::NeedMore();
  return ReadRecipient(text, p, /*at_start=*/p == pos, final);
}

ScanStep AtMarker(std::string_view text, size_t pos, size_t index, bool final) {
  switch (index) {
    case 0:  // >>>
      return ReadRecipient(text, pos + kRecipient.size(), /*at_start=*/false, final);
    case 1: {  // <function=NAME>
      size_t p = pos + kFunctionOpen.size();
      size_t q = p;
      while (q < text.size() && IsNameChar(text[q])) ++q;
      if (q == text.size()) return ScanStep::NeedMore();
      if (q == p || text[q] != '>') return ScanStep::Malformed(p);
      return ReadArguments(text, q + 1, std::string(text.substr(p, q - p)), kFunctionClose);
    }
    default: {  // <|python_tag|>code
      if (!final) return ScanStep::NeedMore();
      return ScanStep::Calls(text.size(), {PythonCall(text.substr(pos + kPythonTag.size()))});
    }
  }
}

}  // namespace

std::unique_ptr<ToolCallParser> NewFunctionaryV3Parser() {
  MarkerScanSpec spec;
  spec.markers = {kRecipient, kFunctionOpen, kPythonTag};
  spec.at_marker = [](std::string_view text, size_t pos, size_t index, bool final) {
    return AtMarker(text, pos, index, final);
  };
  spec.at_state = [](std::string_view text, size_t pos, int, bool final) { return AtStart(text, pos, final); };
  return std::make_unique<MarkerToolCallParser>("functionary_v3", std::move(spec));
}

}  // namespace kvserve::toolcall

// deepseek_v3: DeepSeek V3, R1 (and its distills), V3.1 (vLLM's "deepseek_v3" / "deepseek_v31").
//
//   V3 / R1:  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n
//             ```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>...
//             <｜tool▁calls▁end｜>
//   V3.1:     <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}
//             <｜tool▁call▁end｜><｜tool▁calls▁end｜>
//
// The begin marker also in the spellings R1 is known to produce (llama.cpp lists them). The
// markers need the detokenizer to keep special tokens. A malformed call makes the rest of the
// output content.
#include <iterator>

#include "toolcall/formats.h"

namespace kvserve::toolcall {

namespace {

constexpr std::string_view kCallsBegin[] = {"<｜tool▁calls▁begin｜>", "<｜tool_calls_begin｜>",
                                            "<｜tool calls begin｜>", "<｜tool\\_calls\\_begin｜>",
                                            "<｜tool▁calls｜>"};
constexpr std::string_view kCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kSep = "<｜tool▁sep｜>";
constexpr std::string_view kFence = "```";
constexpr size_t kMaxNameBytes = 256;
constexpr int kStateInBlock = kFirstFormatState;

// Reads up to (not including) `stop` or a newline; npos when the text ends first, or
// text.size() + 1 when a newline or the size cap comes first.
size_t FindOnLine(std::string_view text, size_t p, std::string_view stop) {
  for (size_t q = p; q < text.size(); ++q) {
    if (StartsWithAt(text, q, stop)) return q;
    if (text[q] == '\n' || q - p > kMaxNameBytes) return text.size() + 1;
  }
  return std::string_view::npos;
}

std::string_view Trim(std::string_view s) {
  size_t b = SkipSpace(s, 0);
  size_t e = s.size();
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r' || s[e - 1] == '\n')) --e;
  return s.substr(b, e - b);
}

// One call at text[p]: [<｜tool▁call▁begin｜>] header <｜tool▁sep｜> ... <｜tool▁call▁end｜>.
ScanStep ReadCall(std::string_view text, size_t p) {
  if (StartsWithAt(text, p, kCallBegin)) {
    p += kCallBegin.size();
  } else if (IsProperPrefixAt(text, p, kCallBegin)) {
    return ScanStep::NeedMore();
  }
  size_t sep = FindOnLine(text, p, kSep);
  if (sep == std::string_view::npos) return ScanStep::NeedMore();
  if (sep > text.size()) return ScanStep::RestIsContent();
  std::string_view header = Trim(text.substr(p, sep - p));
  size_t r = sep + kSep.size();
  std::string name;
  if (header == "function") {  // V3 / R1: the name on its own line, then a fenced JSON block
    size_t eol = text.find('\n', r);
    if (eol == std::string_view::npos) return text.size() - r > kMaxNameBytes ? ScanStep::RestIsContent() : ScanStep::NeedMore();
    name = std::string(Trim(text.substr(r, eol - r)));
    r = SkipSpace(text, eol + 1);
    if (IsProperPrefixAt(text, r, "```json")) return ScanStep::NeedMore();
    if (StartsWithAt(text, r, kFence)) {
      r += kFence.size();
      if (StartsWithAt(text, r, "json")) r += 4;
    }
  } else {  // V3.1: NAME<｜tool▁sep｜>{...}
    name = std::string(header);
  }
  if (name.empty()) return ScanStep::RestIsContent();
  r = SkipSpace(text, r);
  if (r == text.size()) return ScanStep::NeedMore();
  if (text[r] != '{') return ScanStep::RestIsContent();
  JsonScan json = ScanJsonValue(text, r);
  if (json.status == JsonScanStatus::kIncomplete) return ScanStep::NeedMore();
  if (json.status == JsonScanStatus::kInvalid) return ScanStep::RestIsContent();
  std::optional<Json> args = ParseJson(text.substr(r, json.end - r));
  if (!args || !args->is_object()) return ScanStep::RestIsContent();
  size_t s = SkipSpace(text, json.end);
  if (IsProperPrefixAt(text, s, kFence)) return ScanStep::NeedMore();
  if (StartsWithAt(text, s, kFence)) s = SkipSpace(text, s + kFence.size());
  if (s == text.size() || IsProperPrefixAt(text, s, kCallEnd)) return ScanStep::NeedMore();
  if (!StartsWithAt(text, s, kCallEnd)) return ScanStep::RestIsContent();
  return ScanStep::Calls(s + kCallEnd.size(), {ParsedCall{std::move(name), CompactJson(*args)}}, kStateInBlock);
}

ScanStep AtMarker(std::string_view text, size_t pos, size_t index) {
  size_t p = pos;
  if (index < std::size(kCallsBegin)) p = SkipSpace(text, pos + kCallsBegin[index].size());
  if (p == text.size()) return ScanStep::NeedMore();
  return ReadCall(text, p);
}

// Between calls: another call, the end of the block, or content.
ScanStep InBlock(std::string_view text, size_t pos) {
  size_t p = SkipSpace(text, pos);
  if (p == text.size()) return ScanStep::NeedMore();
  if (StartsWithAt(text, p, kCallsEnd)) return ScanStep::Calls(p + kCallsEnd.size(), {}, kStateMarkers);
  if (StartsWithAt(text, p, kCallBegin)) return ReadCall(text, p);
  if (IsProperPrefixAt(text, p, kCallsEnd) || IsProperPrefixAt(text, p, kCallBegin)) return ScanStep::NeedMore();
  return ScanStep::Leave();
}

}  // namespace

std::unique_ptr<ToolCallParser> NewDeepSeekV3Parser() {
  MarkerScanSpec spec;
  spec.markers.assign(std::begin(kCallsBegin), std::end(kCallsBegin));
  spec.markers.push_back(kCallBegin);
  spec.at_marker = [](std::string_view text, size_t pos, size_t index, bool) { return AtMarker(text, pos, index); };
  spec.at_state = [](std::string_view text, size_t pos, int state, bool) {
    return state == kStateInBlock ? InBlock(text, pos) : ScanStep::Leave();
  };
  return std::make_unique<MarkerToolCallParser>("deepseek_v3", std::move(spec));
}

}  // namespace kvserve::toolcall

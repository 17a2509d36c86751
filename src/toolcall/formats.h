// The format parsers behind CreateToolCallParser and the marker-driven scan loop they share.
// Internal to src/toolcall.
#pragma once

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "toolcall/scan_util.h"
#include "toolcall/tool_call_parser.h"

namespace kvserve::toolcall {

// Scan states shared by all formats (a format adds its own from kFirstFormatState).
inline constexpr int kStateStart = 0;          // nothing read yet
inline constexpr int kStateMarkers = 1;        // content, looking for call markers
inline constexpr int kStateRestIsContent = 2;  // a malformed call: all that follows is content
inline constexpr int kFirstFormatState = 3;

// What reading at a position decided.
struct ScanStep {
  enum class Status {
    kCalls,          // text[pos, end) was these calls (or markup to drop, with no calls)
    kMalformed,      // text[pos, end) is content
    kRestIsContent,  // everything from pos on is content
    kNeedMore,       // cannot decide before more text (final scans: treated as kRestIsContent)
    kLeaveState,     // nothing consumed; continue in kStateMarkers at pos
  };
  Status status = Status::kNeedMore;
  size_t end = 0;
  std::vector<ParsedCall> calls;
  int next_state = kStateMarkers;

  static ScanStep NeedMore() { return {}; }
  static ScanStep RestIsContent() { return {Status::kRestIsContent, 0, {}, kStateRestIsContent}; }
  static ScanStep Malformed(size_t end) { return {Status::kMalformed, end, {}, kStateMarkers}; }
  static ScanStep Calls(size_t end, std::vector<ParsedCall> calls, int next_state = kStateMarkers) {
    return {Status::kCalls, end, std::move(calls), next_state};
  }
  static ScanStep Leave() { return {Status::kLeaveState, 0, {}, kStateMarkers}; }
};

struct MarkerScanSpec {
  // Markers that may start a call in kStateMarkers. No marker may occur inside another (nor
  // be a prefix of one): a partial scan would commit to the shorter one before the text shows
  // whether the longer one is there.
  std::vector<std::string_view> markers;
  // Reads at text[pos], where markers[marker_index] starts. `final`: the text is complete
  // (a step may only return kNeedMore when it is not).
  std::function<ScanStep(std::string_view text, size_t pos, size_t marker_index, bool final)> at_marker;
  // Reads at text[pos] in kStateStart and in format states (may be empty: kStateStart then
  // goes straight to kStateMarkers).
  std::function<ScanStep(std::string_view text, size_t pos, int state, bool final)> at_state;
};

// The scan loop: content up to the next marker, the format's reading there, and so on; with
// final = false it stops where a step needs more text or a marker may be starting.
ToolCallScan ScanWithMarkers(const MarkerScanSpec& spec, std::string_view text, size_t start, int state,
                             bool final);

std::unique_ptr<ToolCallParser> NewHermesParser();
std::unique_ptr<ToolCallParser> NewLlama3JsonParser();
std::unique_ptr<ToolCallParser> NewMistralParser();
std::unique_ptr<ToolCallParser> NewDeepSeekV3Parser();
std::unique_ptr<ToolCallParser> NewFunctionaryV3Parser();
std::unique_ptr<ToolCallParser> NewCommandRParser();

// A parser defined by a MarkerScanSpec.
class MarkerToolCallParser : public ToolCallParser {
 public:
  MarkerToolCallParser(std::string_view name, MarkerScanSpec spec,
                       ToolCallIdStyle id_style = ToolCallIdStyle::kOpenAi)
      : name_(name), spec_(std::move(spec)), id_style_(id_style) {}

  std::string_view name() const override { return name_; }
  ToolCallIdStyle id_style() const override { return id_style_; }
  ToolCallScan Scan(std::string_view text, size_t start, int state, bool final) const override {
    return ScanWithMarkers(spec_, text, start, state, final);
  }

 private:
  std::string_view name_;
  MarkerScanSpec spec_;
  ToolCallIdStyle id_style_;
};

}  // namespace kvserve::toolcall

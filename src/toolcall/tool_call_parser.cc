#include "toolcall/tool_call_parser.h"

#include "base/check.h"
#include "toolcall/formats.h"
#include "toolcall/output_delta.h"
#include "toolcall/tool_call_stream.h"

namespace kvserve::toolcall {

namespace {

constexpr char kAlphanumerics[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

}  // namespace

ToolCallIdGenerator ToolCallIdGenerator::FromRandomDevice() {
  std::random_device device;
  uint64_t seed = (static_cast<uint64_t>(device()) << 32) ^ device();
  return ToolCallIdGenerator(seed);
}

std::string ToolCallIdGenerator::Next(ToolCallIdStyle style) {
  std::string id = style == ToolCallIdStyle::kOpenAi ? "call_" : "";
  int length = style == ToolCallIdStyle::kOpenAi ? 24 : 9;
  std::uniform_int_distribution<int> pick(0, static_cast<int>(sizeof(kAlphanumerics)) - 2);
  for (int i = 0; i < length; ++i) id.push_back(kAlphanumerics[pick(rng_)]);
  return id;
}

ParsedToolCalls ToolCallParser::Parse(std::string_view text, ToolCallIdGenerator& ids) const {
  ToolCallScan scan = Scan(text, 0, kStateStart, /*final=*/true);
  KV_CHECK_EQ(scan.committed_end, text.size());
  SegmentAssembler assembler(id_style(), &ids);
  std::vector<OutputDelta> deltas;
  for (const ScanSegment& segment : scan.segments) assembler.Add(segment, &deltas);
  assembler.Flush(/*final=*/true, &deltas);
  ChatOutput message;
  for (const OutputDelta& d : deltas) AccumulateDelta(d, &message);
  return ParsedToolCalls{std::move(message.content), std::move(message.tool_calls)};
}

ToolCallScan ScanWithMarkers(const MarkerScanSpec& spec, std::string_view text, size_t start, int state,
                             bool final) {
  ToolCallScan scan;
  scan.committed_end = start;
  scan.resume_state = state;
  size_t pos = start;
  auto add_content = [&](size_t begin, size_t end) {
    if (end <= begin) return;
    if (!scan.segments.empty() && !scan.segments.back().is_call) {
      scan.segments.back().content.append(text.substr(begin, end - begin));
    } else {
      ScanSegment s;
      s.content = std::string(text.substr(begin, end - begin));
      scan.segments.push_back(std::move(s));
    }
  };
  auto commit = [&] {
    scan.committed_end = pos;
    scan.resume_state = state;
  };
  // Applies a step read at pos; false when the scan must stop there (more text needed).
  auto apply = [&](ScanStep step) -> bool {
    if (step.status == ScanStep::Status::kNeedMore) {
      if (!final) return false;
      step = ScanStep::RestIsContent();
    }
    switch (step.status) {
      case ScanStep::Status::kCalls:
        KV_CHECK(step.end > pos || !step.calls.empty() || step.next_state != state) << "scan made no progress";
        for (ParsedCall& call : step.calls) {
          ScanSegment s;
          s.is_call = true;
          s.name = std::move(call.name);
          s.arguments = std::move(call.arguments);
          scan.segments.push_back(std::move(s));
        }
        pos = step.end;
        state = step.next_state;
        break;
      case ScanStep::Status::kMalformed:
        KV_CHECK(step.end > pos) << "scan made no progress";
        add_content(pos, step.end);
        pos = step.end;
        state = step.next_state;
        break;
      case ScanStep::Status::kRestIsContent:
        state = kStateRestIsContent;
        break;
      case ScanStep::Status::kLeaveState:
        state = kStateMarkers;
        break;
      case ScanStep::Status::kNeedMore:
        break;
    }
    commit();
    return true;
  };

  while (true) {
    if (state == kStateRestIsContent) {
      add_content(pos, text.size());
      pos = text.size();
      commit();
      return scan;
    }
    if (state != kStateMarkers) {
      if (!spec.at_state) {
        state = kStateMarkers;
        continue;
      }
      if (!apply(spec.at_state(text, pos, state, final))) return scan;
      continue;
    }
    MarkerMatch m = FindFirstMarker(text, pos, spec.markers);
    if (m.pos == std::string_view::npos) {
      size_t end = final ? text.size() : PartialMarkerStart(text, pos, spec.markers);
      add_content(pos, end);
      pos = end;
      commit();
      return scan;
    }
    add_content(pos, m.pos);
    pos = m.pos;
    commit();
    if (!apply(spec.at_marker(text, m.pos, m.index, final))) return scan;
  }
}

const std::vector<std::string>& ToolCallParserNames() {
  static const std::vector<std::string> names = {"hermes", "llama3_json", "mistral", "deepseek_v3",
                                                 "functionary_v3", "command_r"};
  return names;
}

StatusOr<std::unique_ptr<ToolCallParser>> CreateToolCallParser(std::string_view name) {
  if (name == "hermes" || name == "qwen2_5" || name == "qwen3") return NewHermesParser();
  if (name == "llama3_json" || name == "llama4_json") return NewLlama3JsonParser();
  if (name == "mistral") return NewMistralParser();
  if (name == "deepseek_v3" || name == "deepseek_r1" || name == "deepseek_v31") return NewDeepSeekV3Parser();
  if (name == "functionary_v3" || name == "functionary") return NewFunctionaryV3Parser();
  if (name == "command_r" || name == "command_r7b") return NewCommandRParser();
  std::string choices;
  for (const std::string& n : ToolCallParserNames()) choices += (choices.empty() ? "" : ", ") + n;
  return InvalidArgumentError("unknown tool call parser '" + std::string(name) + "' (choose one of: " + choices + ")");
}

const std::vector<std::string>& MarkupTokenTexts() {
  static const std::vector<std::string> kTexts = {
      // hermes / qwen
      "<tool_call>", "</tool_call>",
      // llama 3.x, functionary
      "<|python_tag|>",
      // mistral
      "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]",
      // deepseek v3 / r1
      "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
      "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<｜tool▁calls｜>",
      // command-r
      "<|START_ACTION|>", "<|END_ACTION|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>",
      "<|START_THINKING|>", "<|END_THINKING|>",
      // reasoning
      "<think>", "</think>"};
  return kTexts;
}

}  // namespace kvserve::toolcall

// Parsers for outputs whose shape a constraint forced (tool_choice "required" or a named
// function, decoded under the structured-output grammar), as vLLM builds them:
//
//   required:        [{"name": "get_weather", "parameters": {"city": "Paris"}}, ...]
//   named function:  {"city": "Paris"}   (the arguments of the one function)
//
// They share the streaming machinery with the format parsers; should the output not parse
// after all (the constraint was cut off by max_tokens), it is content.
#include "toolcall/forced_tool_call_parser.h"

#include "toolcall/formats.h"

namespace kvserve::toolcall {

namespace {

class RequiredToolCallParser : public ToolCallParser {
 public:
  std::string_view name() const override { return "required"; }
  ToolCallIdStyle id_style() const override { return id_style_; }
  explicit RequiredToolCallParser(ToolCallIdStyle id_style) : id_style_(id_style) {}

  ToolCallScan Scan(std::string_view text, size_t start, int state, bool final) const override {
    MarkerScanSpec spec;
    spec.at_state = [](std::string_view text, size_t pos, int, bool) {
      size_t p = SkipSpace(text, pos);
      if (p == text.size()) return ScanStep::NeedMore();
      if (text[p] != '[') return ScanStep::RestIsContent();
      JsonScan json = ScanJsonValue(text, p);
      if (json.status == JsonScanStatus::kIncomplete) return ScanStep::NeedMore();
      if (json.status == JsonScanStatus::kInvalid) return ScanStep::RestIsContent();
      std::optional<Json> value = ParseJson(text.substr(p, json.end - p));
      if (!value || value->empty()) return ScanStep::RestIsContent();
      std::vector<ParsedCall> calls;
      for (const Json& element : *value) {
        std::optional<ParsedCall> call = CallFromObject(element, "name", {"parameters", "arguments"});
        if (!call) return ScanStep::RestIsContent();
        calls.push_back(std::move(*call));
      }
      return ScanStep::Calls(json.end, std::move(calls));
    };
    return ScanWithMarkers(spec, text, start, state, final);
  }

 private:
  ToolCallIdStyle id_style_;
};

class NamedToolCallParser : public ToolCallParser {
 public:
  NamedToolCallParser(std::string function_name, ToolCallIdStyle id_style)
      : function_name_(std::move(function_name)), id_style_(id_style) {}
  std::string_view name() const override { return "named"; }
  ToolCallIdStyle id_style() const override { return id_style_; }

  ToolCallScan Scan(std::string_view text, size_t start, int state, bool final) const override {
    MarkerScanSpec spec;
    spec.at_state = [this](std::string_view text, size_t pos, int, bool) {
      size_t p = SkipSpace(text, pos);
      if (p == text.size()) return ScanStep::NeedMore();
      if (text[p] != '{') return ScanStep::RestIsContent();
      JsonScan json = ScanJsonValue(text, p);
      if (json.status == JsonScanStatus::kIncomplete) return ScanStep::NeedMore();
      if (json.status == JsonScanStatus::kInvalid) return ScanStep::RestIsContent();
      std::optional<Json> args = ParseJson(text.substr(p, json.end - p));
      if (!args || !args->is_object()) return ScanStep::RestIsContent();
      return ScanStep::Calls(json.end, {ParsedCall{function_name_, CompactJson(*args)}});
    };
    return ScanWithMarkers(spec, text, start, state, final);
  }

 private:
  std::string function_name_;
  ToolCallIdStyle id_style_;
};

}  // namespace

std::unique_ptr<ToolCallParser> CreateRequiredToolCallParser(ToolCallIdStyle id_style) {
  return std::make_unique<RequiredToolCallParser>(id_style);
}

std::unique_ptr<ToolCallParser> CreateNamedToolCallParser(std::string function_name, ToolCallIdStyle id_style) {
  return std::make_unique<NamedToolCallParser>(std::move(function_name), id_style);
}

}  // namespace kvserve::toolcall

#include "toolcall/reasoning_parser.h"

#include "base/check.h"
#include "toolcall/scan_util.h"

namespace kvserve::toolcall {

namespace {

std::string_view TrimSpace(std::string_view s) {
  size_t b = SkipSpace(s, 0);
  size_t e = s.size();
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r' || s[e - 1] == '\n')) --e;
  return s.substr(b, e - b);
}

}  // namespace

const std::vector<std::string>& ReasoningParserNames() {
  static const std::vector<std::string> names = {"deepseek_r1", "qwen3", "command_r", "mistral"};
  return names;
}

StatusOr<ReasoningParserOptions> ReasoningParserOptionsFor(std::string_view name) {
  ReasoningParserOptions options;
  if (name == "deepseek_r1") {
    options.starts_in_reasoning = true;
    return options;
  }
  if (name == "qwen3" || name == "deepseek_v3") return options;
  if (name == "command_r" || name == "command_r7b") {
    options.start_tag = "<|START_THINKING|>";
    options.end_tag = "<|END_THINKING|>";
    return options;
  }
  if (name == "mistral") {  // Magistral, Ministral 3 reasoning
    options.start_tag = "[THINK]";
    options.end_tag = "[/THINK]";
    return options;
  }
  std::string choices;
  for (const std::string& n : ReasoningParserNames()) choices += (choices.empty() ? "" : ", ") + n;
  return InvalidArgumentError("unknown reasoning parser '" + std::string(name) + "' (choose one of: " + choices + ")");
}

bool PromptOpensReasoning(std::string_view prompt, const ReasoningParserOptions& options) {
  size_t e = prompt.size();
  while (e > 0 && (prompt[e - 1] == ' ' || prompt[e - 1] == '\n' || prompt[e - 1] == '\t' || prompt[e - 1] == '\r')) --e;
  return prompt.substr(0, e).ends_with(options.start_tag);
}

ReasoningSplit SplitReasoning(std::string_view text, const ReasoningParserOptions& options) {
  ReasoningSplit split;
  size_t p = SkipSpace(text, 0);
  size_t body = 0;
  if (StartsWithAt(text, p, options.start_tag)) {
    body = p + options.start_tag.size();
  } else if (!options.starts_in_reasoning) {
    split.content = std::string(text);
    return split;
  }
  size_t end = text.find(options.end_tag, body);
  if (end == std::string_view::npos) {
    split.reasoning_content = std::string(TrimSpace(text.substr(body)));
    return split;
  }
  split.reasoning_content = std::string(TrimSpace(text.substr(body, end - body)));
  split.content = std::string(text.substr(SkipSpace(text, end + options.end_tag.size())));
  return split;
}

void ReasoningStream::Feed(std::string_view piece, std::vector<OutputDelta>* out) {
  KV_CHECK(!finished_) << "Feed after Finish";
  text_.append(piece);
  Run(/*final=*/false, out);
}

void ReasoningStream::Finish(std::vector<OutputDelta>* out) {
  if (finished_) return;
  Run(/*final=*/true, out);
  finished_ = true;
}

void ReasoningStream::Run(bool final, std::vector<OutputDelta>* out) {
  if (mode_ == Mode::kDeciding) {
    size_t p = SkipSpace(text_, 0);
    if (StartsWithAt(text_, p, options_.start_tag)) {
      mode_ = Mode::kReasoning;
      scan_pos_ = p + options_.start_tag.size();
    } else if (!final && (p == text_.size() || IsProperPrefixAt(text_, p, options_.start_tag))) {
      return;  // may still become the start tag
    } else {
      mode_ = options_.starts_in_reasoning ? Mode::kReasoning : Mode::kContent;
      scan_pos_ = 0;
    }
  }
  if (mode_ == Mode::kReasoning) {
    size_t end = text_.find(options_.end_tag, scan_pos_);
    if (end == std::string::npos) {
      size_t safe = final ? text_.size() : PartialMarkerStart(text_, scan_pos_, {options_.end_tag});
      reasoning_.Append(std::string_view(text_).substr(scan_pos_, safe - scan_pos_));
      scan_pos_ = safe;
      std::string piece = reasoning_.TakeNew(final, /*trim_right=*/true);
      if (!piece.empty()) out->push_back(OutputDelta::Reasoning(std::move(piece)));
      return;
    }
    reasoning_.Append(std::string_view(text_).substr(scan_pos_, end - scan_pos_));
    std::string piece = reasoning_.TakeNew(/*final=*/true, /*trim_right=*/true);
    if (!piece.empty()) out->push_back(OutputDelta::Reasoning(std::move(piece)));
    scan_pos_ = end + options_.end_tag.size();
    content_.Reset(/*trim_left=*/true);
    mode_ = Mode::kContent;
  }
  content_.Append(std::string_view(text_).substr(scan_pos_));
  scan_pos_ = text_.size();
  std::string piece = content_.TakeNew(final, /*trim_right=*/false);
  if (!piece.empty()) out->push_back(OutputDelta::Content(std::move(piece)));
}

}  // namespace kvserve::toolcall

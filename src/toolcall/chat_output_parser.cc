#include "toolcall/chat_output_parser.h"

namespace kvserve::toolcall {

ChatOutput ParseChatOutput(std::string_view text, const ChatOutputOptions& options, ToolCallIdGenerator& ids) {
  ChatOutput message;
  std::string content;
  if (options.reasoning) {
    ReasoningSplit split = SplitReasoning(text, *options.reasoning);
    message.reasoning_content = std::move(split.reasoning_content);
    content = std::move(split.content);
  } else {
    content = std::string(text);
  }
  if (options.tool_call_parser) {
    ParsedToolCalls parsed = options.tool_call_parser->Parse(content, ids);
    message.content = std::move(parsed.content);
    message.tool_calls = std::move(parsed.tool_calls);
  } else {
    message.content = std::move(content);
  }
  return message;
}

ChatOutputStream::ChatOutputStream(ChatOutputOptions options, ToolCallIdGenerator* ids) : options_(std::move(options)) {
  if (options_.reasoning) reasoning_.emplace(*options_.reasoning);
  if (options_.tool_call_parser) tool_calls_.emplace(options_.tool_call_parser, ids);
}

void ChatOutputStream::Feed(std::string_view piece, std::vector<OutputDelta>* out) {
  std::vector<OutputDelta> stage;
  if (reasoning_) {
    reasoning_->Feed(piece, &stage);
  } else {
    stage.push_back(OutputDelta::Content(std::string(piece)));
  }
  Forward(stage, /*final=*/false, out);
}

void ChatOutputStream::Finish(std::vector<OutputDelta>* out) {
  std::vector<OutputDelta> stage;
  if (reasoning_) reasoning_->Finish(&stage);
  Forward(stage, /*final=*/true, out);
}

void ChatOutputStream::Forward(std::vector<OutputDelta>& stage, bool final, std::vector<OutputDelta>* out) {
  for (OutputDelta& d : stage) {
    if (d.kind != OutputDelta::Kind::kContent) {
      out->push_back(std::move(d));
    } else if (tool_calls_) {
      tool_calls_->Feed(d.text, out);
    } else {
      plain_content_.Append(d.text);
    }
  }
  if (tool_calls_) {
    if (final) tool_calls_->Finish(out);
    return;
  }
  // Without a tool stage, content passes through; only an incomplete UTF-8 sequence (and
  // trailing whitespace, harmlessly) waits.
  std::string piece = plain_content_.TakeNew(final, /*trim_right=*/false);
  if (!piece.empty()) out->push_back(OutputDelta::Content(std::move(piece)));
}

}  // namespace kvserve::toolcall

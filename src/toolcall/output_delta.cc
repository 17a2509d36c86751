#include "toolcall/output_delta.h"

#include "base/check.h"

namespace kvserve::toolcall {

void AccumulateDelta(const OutputDelta& delta, ChatOutput* message) {
  switch (delta.kind) {
    case OutputDelta::Kind::kContent:
      message->content += delta.text;
      break;
    case OutputDelta::Kind::kReasoning:
      message->reasoning_content += delta.text;
      break;
    case OutputDelta::Kind::kToolCallStart:
      KV_CHECK_EQ(delta.tool_call_index, static_cast<int>(message->tool_calls.size()));
      message->tool_calls.push_back(ToolCall{delta.id, delta.name, delta.text});
      break;
    case OutputDelta::Kind::kToolCallArguments:
      KV_CHECK(delta.tool_call_index >= 0 &&
               delta.tool_call_index < static_cast<int>(message->tool_calls.size()));
      message->tool_calls[delta.tool_call_index].arguments += delta.text;
      break;
  }
}

nlohmann::ordered_json OpenAiDeltaJson(const OutputDelta& delta) {
  using Json = nlohmann::ordered_json;
  switch (delta.kind) {
    case OutputDelta::Kind::kContent:
      return Json{{"content", delta.text}};
    case OutputDelta::Kind::kReasoning:
      return Json{{"reasoning_content", delta.text}};
    case OutputDelta::Kind::kToolCallStart:
      return Json{{"tool_calls", Json::array({Json{{"index", delta.tool_call_index},
                                                   {"id", delta.id},
                                                   {"type", "function"},
                                                   {"function", {{"name", delta.name}, {"arguments", delta.text}}}}})}};
    case OutputDelta::Kind::kToolCallArguments:
      return Json{{"tool_calls", Json::array({Json{{"index", delta.tool_call_index},
                                                   {"function", {{"arguments", delta.text}}}}})}};
  }
  return Json::object();
}

nlohmann::ordered_json OpenAiMessageJson(const ChatOutput& message) {
  using Json = nlohmann::ordered_json;
  Json out{{"role", "assistant"}};
  if (message.content.empty() && !message.tool_calls.empty()) {
    out["content"] = nullptr;
  } else {
    out["content"] = message.content;
  }
  if (!message.reasoning_content.empty()) out["reasoning_content"] = message.reasoning_content;
  if (!message.tool_calls.empty()) {
    Json calls = Json::array();
    for (const ToolCall& c : message.tool_calls) {
      calls.push_back(Json{{"id", c.id}, {"type", "function"},
                           {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    out["tool_calls"] = std::move(calls);
  }
  return out;
}

}  // namespace kvserve::toolcall

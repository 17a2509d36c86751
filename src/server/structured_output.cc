#include "server/structured_output.h"

#include <algorithm>
#include <utility>

#include "grammar/json_schema.h"
#include "toolcall/forced_tool_call_parser.h"
#include "toolcall/parser_selection.h"
#include "toolcall/template_detect.h"

namespace kvserve {

using openai::Json;
using openai::ToolChoice;

namespace {

Status Fail(openai::ParamError* error, const std::string& message, const std::string& param) {
  if (error != nullptr) *error = {param, message, ""};
  return InvalidArgumentError(message);
}

// A tool's parameters schema; a tool without one takes an object of any keys.
Json ParametersOf(const Json& tool) {
  const Json& fn = tool["function"];
  if (fn.contains("parameters") && fn["parameters"].is_object()) return fn["parameters"];
  return Json{{"type", "object"}};
}

}  // namespace

std::string ForcedToolCallSchema(const openai::ChatRequest& request) {
  if (request.tool_choice == ToolChoice::kFunction) {
    for (const Json& tool : request.tools) {
      if (tool["function"]["name"] == request.tool_choice_function) {
        return ParametersOf(tool).dump();
      }
    }
    return "";  // ParseChatRequest checked that the name is a tool's
  }
  if (request.tool_choice != ToolChoice::kRequired) return "";
  Json calls = Json::array();
  for (const Json& tool : request.tools) {
    calls.push_back(Json{{"type", "object"},
                         {"properties",
                          {{"name", {{"type", "string"}, {"enum", {tool["function"]["name"]}}}},
                           {"parameters", ParametersOf(tool)}}},
                         {"required", {"name", "parameters"}}});
  }
  Json schema{{"type", "array"}, {"items", {{"anyOf", calls}}}, {"minItems", 1}};
  if (!request.parallel_tool_calls) schema["maxItems"] = 1;
  return schema.dump();
}

StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> RequestGrammar(
    const openai::GenerationParams& params, const openai::ChatRequest* chat_request,
    grammar::GrammarCache* cache, openai::ParamError* error) {
  const std::string forced = chat_request != nullptr ? ForcedToolCallSchema(*chat_request) : "";
  if (!forced.empty() && params.guided.has_value()) {
    return Fail(error,
                "'" + params.guided_param + "' and tool_choice '" +
                    openai::ToolChoiceName(chat_request->tool_choice) +
                    "' both constrain the output; give one of them",
                params.guided_param);
  }
  if (forced.empty() && !params.guided.has_value()) {
    return std::shared_ptr<const grammar::CompiledGrammar>();
  }
  if (cache == nullptr) {
    return Fail(error, "structured output is not available on this server",
                forced.empty() ? params.guided_param : "tool_choice");
  }
  if (!forced.empty()) {
    auto g = cache->Get({grammar::GrammarKind::kJsonSchema, forced});
    if (g.ok()) return g;
    // Name the function whose parameters the grammar cannot express.
    for (const Json& tool : chat_request->tools) {
      auto alone = grammar::JsonSchemaToGrammar(ParametersOf(tool));
      if (!alone.ok()) {
        const std::string name = tool["function"]["name"].get<std::string>();
        return Fail(error,
                    "tool_choice '" + std::string(openai::ToolChoiceName(chat_request->tool_choice)) +
                        "' constrains the output to the tools' parameters; function '" + name +
                        "': " + alone.status().message(),
                    "tools");
      }
    }
    return Fail(error, "tool_choice: " + g.status().message(), "tool_choice");
  }
  auto g = cache->Get(*params.guided);
  if (!g.ok()) return Fail(error, params.guided_param + ": " + g.status().message(), params.guided_param);
  return g;
}

StatusOr<ChatOutputPlan> PlanChatOutput(const openai::ChatRequest& request,
                                        const ChatOutputConfig& config, bool has_grammar,
                                        std::string_view prompt_text, openai::ParamError* error) {
  ChatOutputPlan plan;
  plan.id_style = config.id_style;
  plan.single_tool_call = !request.parallel_tool_calls;
  switch (request.tool_choice) {
    case ToolChoice::kNone:
      break;
    case ToolChoice::kAuto:
      if (config.tool_call_parser == nullptr) {
        return Fail(error,
                    "\"auto\" tool choice needs the server started with --enable-auto-tool-choice "
                    "(and --tool-call-parser where the chat template does not show the format); "
                    "tool_choice \"required\" or a named function works without them",
                    "tool_choice");
      }
      plan.options.tool_call_parser = config.tool_call_parser;
      plan.id_style = config.tool_call_parser->id_style();
      break;
    case ToolChoice::kRequired:
      plan.forced_parser = toolcall::CreateRequiredToolCallParser(config.id_style);
      plan.options.tool_call_parser = plan.forced_parser.get();
      break;
    case ToolChoice::kFunction:
      plan.forced_parser =
          toolcall::CreateNamedToolCallParser(request.tool_choice_function, config.id_style);
      plan.options.tool_call_parser = plan.forced_parser.get();
      break;
  }
  if (config.reasoning.has_value() && !has_grammar) {
    plan.options.reasoning = config.reasoning;
    plan.options.reasoning->starts_in_reasoning =
        toolcall::PromptOpensReasoning(prompt_text, *config.reasoning);
  }
  return plan;
}

StatusOr<ChatOutputConfig> ResolveChatOutput(const ChatOutputFlags& flags,
                                             std::string_view template_source,
                                             std::unique_ptr<toolcall::ToolCallParser>* owned_parser,
                                             std::string* banner) {
  ChatOutputConfig config;
  KV_ASSIGN_OR_RETURN(*owned_parser,
                      toolcall::ResolveToolCallParser(flags.tool_call_parser,
                                                      flags.enable_auto_tool_choice,
                                                      template_source));
  config.tool_call_parser = owned_parser->get();
  KV_ASSIGN_OR_RETURN(config.reasoning,
                      toolcall::ResolveReasoningParser(flags.reasoning_parser, template_source));
  if (config.tool_call_parser != nullptr) {
    config.id_style = config.tool_call_parser->id_style();
  } else if (toolcall::DetectToolCallFormat(template_source) == "mistral") {
    config.id_style = toolcall::ToolCallIdStyle::kMistral;
  }
  *banner = "tool_choice auto: ";
  if (config.tool_call_parser != nullptr) {
    *banner += std::string(config.tool_call_parser->name()) + " parser" +
               (flags.tool_call_parser.empty() ? " (from the chat template)" : "");
  } else {
    *banner += "off (--enable-auto-tool-choice)";
  }
  *banner += "; tool_choice required / named and structured output: on; reasoning parser: ";
  *banner += config.reasoning.has_value()
                 ? config.reasoning->start_tag + "..." + config.reasoning->end_tag
                 : std::string("off");
  return config;
}

std::vector<TokenId> MarkupTokenIds(const Tokenizer& tokenizer) {
  const std::vector<std::string>& texts = toolcall::MarkupTokenTexts();
  std::vector<TokenId> ids;
  const VocabSpec& spec = tokenizer.spec();
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    if (!spec.token_types.empty() && spec.token_types[id] != TokenType::kControl) continue;
    if (std::find(texts.begin(), texts.end(), spec.tokens[id]) != texts.end()) {
      ids.push_back(static_cast<TokenId>(id));
    }
  }
  return ids;
}

}  // namespace kvserve

// Structured output and tool calls for one chat or completion request, between the parsed
// request and the engine:
//
//   RequestGrammar:  response_format / guided_* / grammar, or tool_choice "required" / a named
//                    function -> the compiled grammar the engine constrains decoding with
//   PlanChatOutput:  tools, tool_choice and the server's parsers -> how each chat choice's text
//                    becomes the assistant message (content, reasoning_content, tool_calls)
//
// No HTTP and no engine here.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "grammar/grammar_cache.h"
#include "server/openai_api.h"
#include "tokenizer/tokenizer.h"
#include "toolcall/chat_output_parser.h"
#include "toolcall/reasoning_parser.h"
#include "toolcall/tool_call_parser.h"

namespace kvserve {

// The JSON schema the output must match under tool_choice "required" (vLLM's shape: an array
// of at least one {"name": <a tool's name>, "parameters": <its parameters>}, at most one with
// parallel_tool_calls false) or a named function (its parameters). Empty for "none"/"auto".
std::string ForcedToolCallSchema(const openai::ChatRequest& request);

// The grammar of a request (`chat_request` null for /v1/completions), compiled through `cache`
// (thread-safe, shared by the server). Null when the request constrains nothing. Errors are
// InvalidArgument with *error naming the field (an unsupported JSON Schema keyword is named
// with its JSON pointer; for a forced tool call, the function whose parameters hold it).
// A forced tool call and a guided field together are refused.
StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> RequestGrammar(
    const openai::GenerationParams& params, const openai::ChatRequest* chat_request,
    grammar::GrammarCache* cache, openai::ParamError* error);

// The server's tool-call and reasoning settings, fixed at start-up (--enable-auto-tool-choice,
// --tool-call-parser, --reasoning-parser, the chat template). Borrowed parser: must outlive
// the server.
struct ChatOutputConfig {
  // For tool_choice "auto"; null: requests with tools and tool_choice "auto" are refused (as
  // vLLM does without --enable-auto-tool-choice).
  const toolcall::ToolCallParser* tool_call_parser = nullptr;
  std::optional<toolcall::ReasoningParserOptions> reasoning;  // nullopt: no reasoning split
  // Ids of forced tool calls (the model's convention: Mistral templates accept only 9
  // alphanumerics).
  toolcall::ToolCallIdStyle id_style = toolcall::ToolCallIdStyle::kOpenAi;
};

// The start-up flags of tool calls and reasoning (vLLM's names).
struct ChatOutputFlags {
  bool enable_auto_tool_choice = false;  // --enable-auto-tool-choice
  std::string tool_call_parser;          // --tool-call-parser; empty: from the template
  std::string reasoning_parser;          // --reasoning-parser; empty: off; "auto"
};

// The flags resolved against the chat template's source (the one requests with tools render
// with): the parsers (`owned_parser` keeps the tool_choice "auto" parser, which the config
// points at), the id style, and a line for the start-up banner. InvalidArgument for an
// unknown parser name, --tool-call-parser without --enable-auto-tool-choice, or a format the
// template does not show.
StatusOr<ChatOutputConfig> ResolveChatOutput(const ChatOutputFlags& flags,
                                             std::string_view template_source,
                                             std::unique_ptr<toolcall::ToolCallParser>* owned_parser,
                                             std::string* banner);

// Control tokens whose text the output must keep (EngineOptions::detokenize_special_ids): the
// tool-call and reasoning markup (toolcall::MarkupTokenTexts) the parsers read.
std::vector<TokenId> MarkupTokenIds(const Tokenizer& tokenizer);

// How one chat request's choices are read. Owns the forced parser it may use.
struct ChatOutputPlan {
  std::unique_ptr<toolcall::ToolCallParser> forced_parser;  // "required" / a named function
  toolcall::ChatOutputOptions options;  // tool_call_parser: forced_parser or the server's
  toolcall::ToolCallIdStyle id_style = toolcall::ToolCallIdStyle::kOpenAi;
  // parallel_tool_calls false: calls after the first are dropped (with "auto"; a forced
  // "required" grammar allows only one).
  bool single_tool_call = false;
  // Nothing to parse: the text is the content, as it streams.
  bool plain() const { return options.tool_call_parser == nullptr && !options.reasoning; }
};

// The plan for a chat request whose rendered prompt is `prompt_text` (a reasoning block the
// prompt opens starts the output in reasoning). A request with a grammar gets no reasoning
// split: the grammar constrains the output from its first token. InvalidArgument (param
// "tool_choice") for tool_choice "auto" with tools on a server without a tool-call parser.
StatusOr<ChatOutputPlan> PlanChatOutput(const openai::ChatRequest& request,
                                        const ChatOutputConfig& config, bool has_grammar,
                                        std::string_view prompt_text, openai::ParamError* error);

}  // namespace kvserve

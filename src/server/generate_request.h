// The steps of a generation request (/v1/completions, /v1/chat/completions) before it reaches
// the engine, as plain functions between plain structs:
//
//   body --ParseGenerateRequest--> GenerateRequest --BuildEngineInputs--> EngineInputs
//        (JSON, field types/ranges)               (chat template, tokenize, vocabulary,
//                                                  model name, context length, seeds)
//
// No HTTP and no engine here: OpenAiServer (generate_handler.cc) runs these, then admits and
// submits one engine request per EngineInputs choice and responds (streamed or gathered).
// Every failure is a Status the client caused (InvalidArgument: HTTP 400) with the request
// field at fault, and an OpenAI error code where there is one, in an openai::ParamError.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "runtime/request.h"
#include "server/openai_api.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {

// Renders a chat request's messages (and tools) into the prompt text, with the model's chat
// template. Called from HTTP threads: must be thread-safe.
using ChatRenderer = std::function<StatusOr<std::string>(const openai::ChatRequest&)>;

// A generation request body, parsed and checked field by field (types, ranges, required
// fields). Plain value type.
struct GenerateRequest {
  bool chat = false;
  openai::ChatRequest chat_request;    // when chat
  openai::CompletionRequest completion;  // when !chat
  const openai::GenerationParams& params() const {
    return chat ? chat_request.params : completion.params;
  }
};

// Step 1: the JSON body -> GenerateRequest. Errors: the body is not JSON, or a field is
// missing, of the wrong type or out of range (error->param names it).
StatusOr<GenerateRequest> ParseGenerateRequest(std::string_view body, bool chat,
                                               openai::ParamError* error);

// A chat request's prompt: rendered with `render_chat` (empty: the server has no template),
// tokenized with special tokens recognised and without an extra BOS (the template writes it).
// Shared by generation and /tokenize. A rendered text whose byte length alone proves it has
// more than max_prompt_tokens tokens (CheckPromptBytes) is refused before tokenizing.
// prompt_text (optional): the rendered text.
StatusOr<std::vector<TokenId>> TokenizeChat(const openai::ChatRequest& request,
                                            const ChatRenderer& render_chat,
                                            const Tokenizer& tokenizer, openai::ParamError* error,
                                            int64_t max_prompt_tokens = INT64_MAX,
                                            std::string* prompt_text = nullptr);

// What BuildEngineInputs needs from the server. Borrowed: must outlive the call.
struct EngineInputOptions {
  const Tokenizer* tokenizer = nullptr;     // required
  const ChatRenderer* render_chat = nullptr;  // required for chat requests
  std::string served_model_name;  // the only `model` a request may name (or omit)
  int64_t max_model_len = 0;      // prompt + max_tokens must fit
  KvEvictionPolicy kv_policy;     // the server's default (--kv-eviction ...)
  // Compiles structured-output grammars (thread-safe); null: requests with one are refused.
  grammar::GrammarCache* grammar_cache = nullptr;
};

// The server's default policy with a request's "kv_policy" fields applied, validated;
// InvalidArgument with *error naming the field ("kv_policy.budget_tokens") otherwise.
StatusOr<KvEvictionPolicy> ApplyKvPolicy(const KvEvictionPolicy& server_default,
                                         const openai::GenerationParams& params,
                                         openai::ParamError* error);

// One engine request per choice: prompts x best_of (n unless best_of is larger), choice j of
// prompt p at index p * best_of + j.
struct EngineInputs {
  struct Choice {
    int64_t prompt_index = 0;
    RequestInput input;
  };
  std::vector<int64_t> prompt_lengths;  // tokens of each prompt
  std::vector<Choice> choices;
  std::string chat_prompt_text;  // a chat request's rendered prompt
  std::vector<std::string> echo_texts;  // completions with echo: each prompt's text
  // The grammar every choice's output must match (RequestGrammar), or null.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
};

// Step 2: GenerateRequest -> EngineInputs: renders the chat template or tokenizes the
// prompts, then checks what needs the model (token ids in the vocabulary, the model name,
// prompt and max_tokens within max_model_len), compiles the request's grammar and fills each
// choice's RequestInput (the default max_tokens, seed + j with a seed, else a random seed per
// choice).
StatusOr<EngineInputs> BuildEngineInputs(const GenerateRequest& request,
                                         const EngineInputOptions& options,
                                         openai::ParamError* error);

}  // namespace kvserve

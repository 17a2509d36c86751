// The input of `kvserve prompt-lint`: a JSONL file of OpenAI request bodies, one JSON object
// per line, read into requests (ParseRequestFile) and turned into the token lists the server
// would compute for them (EncodeRequests): chat bodies ("messages", optional "tools",
// "chat_template_kwargs", "add_generation_prompt") rendered with the model's chat template and
// tokenized as /v1/chat/completions does (no BOS added: the template writes it; special-token
// texts parsed); completions bodies ("prompt": a string, a list of strings, a list of token
// ids or a list of such lists) tokenized as /v1/completions does (BOS added when the
// vocabulary asks; ids used as they are). "cache_salt" selects the cache namespace. Other
// fields (model, max_tokens, ...) are ignored. Blank lines are skipped.
//
// Every error names its 1-based line; a bad line is an error, never a crash (JSON nesting is
// bounded before parsing, as the server bounds it).
//
// Plain functions and data; the encoder borrows a tokenizer and templates that are safe to
// share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/ids.h"
#include "base/json_depth.h"
#include "base/status.h"
#include "chat/chat_template.h"
#include "chat/model_chat_templates.h"
#include "promptlint/prompt_lint.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::promptlint {

// One completions prompt: text, or token ids when `text` is unset.
struct CompletionPrompt {
  std::optional<std::string> text;
  std::vector<TokenId> ids;
};

// One line of the file.
struct RequestBody {
  int64_t line = 0;  // 1-based
  bool chat = false;
  std::string cache_salt;  // "" when absent
  ChatTemplateInputs chat_inputs;        // chat: messages, tools, extra, add_generation_prompt
  std::vector<CompletionPrompt> prompts;  // completions: one or more prompts
};

// Deepest JSON nesting accepted on a line: the server's (base/json_depth.h).
inline constexpr int64_t kMaxRequestNestingDepth = kMaxJsonNestingDepth;

// Parses every non-blank line. InvalidArgument "line N: ..." for a line that is not a JSON
// object, has neither "messages" nor "prompt" (or both), or has fields of the wrong type;
// InvalidArgument when the file holds no request.
StatusOr<std::vector<RequestBody>> ParseRequestFile(std::string_view text);

// What EncodeRequests renders and tokenizes with. Borrowed.
struct PromptEncoder {
  const Tokenizer* tokenizer = nullptr;                // required
  const ModelChatTemplates* chat_templates = nullptr;  // required when the file has chat lines
};

// One LintPrompt per completions prompt and per chat body, in file order; the namespace is
// the body's cache_salt. InvalidArgument "line N: ..." when a template rejects a conversation,
// a token id is outside the vocabulary, or a prompt is empty.
StatusOr<std::vector<LintPrompt>> EncodeRequests(const std::vector<RequestBody>& requests,
                                                 const PromptEncoder& encoder);

}  // namespace kvserve::promptlint

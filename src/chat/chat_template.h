// Chat templates: turning OpenAI-style messages into the prompt text a model was trained on,
// by rendering the model's own Jinja template (GGUF `tokenizer.chat_template`, Hugging Face
// `tokenizer_config.json` / `chat_template.jinja`, or a file) with the jinja subset
// interpreter (jinja.h), with the variables transformers' apply_chat_template passes:
// messages, tools (None when absent), documents (None), add_generation_prompt, bos_token,
// eos_token, plus any extra keyword arguments. Models without a template fall back to ChatML.
//
// ChatTemplate is immutable after FromString and safe to render from several threads.
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "chat/jinja.h"

namespace kvserve {

struct ChatTemplateInputs {
  // [{"role": ..., "content": ..., optional "tool_calls", "tool_call_id", "name", ...}].
  // ordered_json: key order reaches `tojson` output (as in Python), so keep the client's order.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  std::optional<nlohmann::ordered_json> tools;  // nullopt: the template sees tools = None
  bool add_generation_prompt = false;
  std::string bos_token;
  std::string eos_token;
  // More template variables (e.g. date_string, enable_thinking); they override the above.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // Pins strftime_now() (formatted in UTC); by default it uses the current local time.
  std::optional<std::time_t> now_unix_seconds;
};

class ChatTemplate {
 public:
  // Parses `source`; syntax errors come back as InvalidArgument with the line.
  static StatusOr<ChatTemplate> FromString(std::string source, const jinja::Options& options = {});

  // The prompt text, or InvalidArgument with the template's message (raise_exception) or the
  // error and its line.
  StatusOr<std::string> Render(const ChatTemplateInputs& inputs) const;

  const std::string& source() const { return source_; }

 private:
  ChatTemplate(std::string source, jinja::Template t) : source_(std::move(source)), template_(std::move(t)) {}

  std::string source_;
  jinja::Template template_;
};

// How a template takes the `arguments` of an assistant message's tool calls. Hugging Face's
// convention (and what vLLM passes, json.loads of the OpenAI string) is an object, and most
// tool-using templates print it with `tojson`; a few concatenate it as text (DeepSeek V3.x,
// Functionary v3.x: `'...' + tool_call.function.arguments`) and fail on an object.
enum class ToolCallArgumentsForm { kObject, kString };

// Finds the form `tmpl` takes by rendering a small conversation with one tool call (arguments
// an object, then the same as a JSON string): kString when only the string renders, else
// kObject. For a server to call once per template.
ToolCallArgumentsForm DetectToolCallArgumentsForm(const ChatTemplate& tmpl);

// Rewrites messages[*].tool_calls[*].function.arguments into `form`: kObject parses strings
// that hold a JSON object (others stay as they are, for the template to show as text);
// kString writes objects as json.dumps does (", " and ": ", non-ASCII kept). Messages without
// tool calls are untouched.
void NormalizeToolCallArguments(ToolCallArgumentsForm form, nlohmann::ordered_json* messages);

// How a template takes message content: a string only, or also OpenAI's list of parts
// ([{"type": "text", "text": ...}, ...]). A string-only template prints a list as its Python
// repr, so clients' part lists must become strings first (vLLM's "string" content format).
enum class MessageContentForm { kString, kParts };

// Renders a system/user/assistant/user conversation whose contents are lists of one text part:
// kParts when it renders, every text appears and no list repr does, else kString.
MessageContentForm DetectMessageContentForm(const ChatTemplate& tmpl);

// What the server does to OpenAI messages before rendering, as vLLM does: `content: null`
// (assistant messages with tool_calls) becomes ""; with kString, a list of parts becomes the
// texts of its text parts joined by "\n" (other parts are dropped).
void NormalizeMessageContent(MessageContentForm form, nlohmann::ordered_json* messages);

// The ChatML template (<|im_start|>role\ncontent<|im_end|>\n ...), the fallback for models
// without a template of their own.
extern const char kChatMlTemplateSource[];
ChatTemplate ChatMlTemplate();

// A model's template text plus its special tokens.
struct LoadedChatTemplate {
  std::string source;                          // the default template
  std::optional<std::string> tool_use_source;  // HF "tool_use" variant, when the model has one
  std::string bos_token;                       // "" when the model does not say
  std::string eos_token;
  bool is_chatml_fallback = false;             // the model has no template: ChatML
  std::string origin;  // where it came from: "gguf", "tokenizer_config.json", "file", "chatml"

  // The template text for a request (the tool_use variant when tools are given and present).
  const std::string& SourceFor(bool has_tools) const {
    return has_tools && tool_use_source ? *tool_use_source : source;
  }
};

// Reads a conversation given as JSON into `inputs`: either an array of messages, or a
// request-like object {"messages": [...], optional "tools" (null: none), optional
// "chat_template_kwargs" / "extra" objects whose keys become template variables}. Anything
// else is InvalidArgument "<source> must hold a JSON array of messages or an object with
// "messages"". Other fields of `inputs` are left as they are.
Status ParseConversationJson(const nlohmann::ordered_json& conversation, std::string_view source,
                             ChatTemplateInputs* inputs);

// Parses the template text for `inputs` (LoadedChatTemplate::SourceFor: the tool_use variant
// when inputs has a non-empty tools list) and renders it once. For one-off renders; a server
// parses its templates once and calls ChatTemplate::Render.
StatusOr<std::string> RenderOnce(const LoadedChatTemplate& loaded,
                                 const ChatTemplateInputs& inputs);

// Finds the chat template for `model_path` (a GGUF file: metadata only, no tensors are read; a
// Hugging Face folder: chat_template.jinja, else tokenizer_config.json's `chat_template`
// (a string or a list of {name, template}: "default" and "tool_use"); any other model has
// none) or, when `template_file` is non-empty, reads that file instead (the model, if given,
// still supplies bos/eos tokens). Either path may be empty, not both. Without a template the
// result is ChatML with is_chatml_fallback set (the caller logs it once).
StatusOr<LoadedChatTemplate> LoadChatTemplate(const std::string& model_path,
                                              const std::string& template_file);

}  // namespace kvserve

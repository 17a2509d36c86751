// The chat templates a model is served with, parsed once: --chat-template FILE, else the
// model's own (GGUF metadata, Hugging Face files), else ChatML; the default template and the
// Hugging Face "tool_use" variant when the model has one.
//
// Immutable after Load() and safe to render from several threads (ChatTemplate is).
#pragma once

#include <optional>
#include <string>

#include "base/status.h"
#include "chat/chat_template.h"

namespace kvserve {

class ModelChatTemplates {
 public:
  // `model_path` and `template_file` as LoadChatTemplate takes them, except that both may be
  // empty (a model without a file, e.g. the built-in one: ChatML). bos/eos tokens the template
  // source does not name fall back to `bos_text` / `eos_text` (the tokenizer's token texts).
  static StatusOr<ModelChatTemplates> Load(const std::string& model_path,
                                           const std::string& template_file,
                                           const std::string& bos_text,
                                           const std::string& eos_text);

  // Renders `inputs` with the tool_use variant when it has tools and the model has one, else
  // the default template; bos_token and eos_token are the model's. The messages are first
  // normalised for that template as vLLM does (NormalizeMessageContent,
  // NormalizeToolCallArguments, with the forms detected once at Load).
  StatusOr<std::string> Render(ChatTemplateInputs inputs) const;

  const LoadedChatTemplate& loaded() const { return loaded_; }
  // The source of the template requests with tools render with (the tool_use variant when the
  // model has one): where the model's tool-call and reasoning formats show.
  const std::string& tools_source() const {
    return (tool_use_.has_value() ? *tool_use_ : *main_).tmpl.source();
  }
  bool is_chatml_fallback() const { return loaded_.is_chatml_fallback; }
  // For the start-up banner: "ChatML (the model has none)", "the model's (gguf)" or the file.
  const std::string& description() const { return description_; }

 private:
  ModelChatTemplates() = default;

  struct Variant {
    ChatTemplate tmpl;
    MessageContentForm content_form;
    ToolCallArgumentsForm arguments_form;
  };
  static Variant MakeVariant(ChatTemplate tmpl);

  LoadedChatTemplate loaded_;
  std::optional<Variant> main_;
  std::optional<Variant> tool_use_;
  std::string description_;
};

}  // namespace kvserve

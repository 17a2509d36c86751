#include "chat/model_chat_templates.h"

#include <utility>

namespace kvserve {

StatusOr<ModelChatTemplates> ModelChatTemplates::Load(const std::string& model_path,
                                                       const std::string& template_file,
                                                       const std::string& bos_text,
                                                       const std::string& eos_text) {
  ModelChatTemplates t;
  if (model_path.empty() && template_file.empty()) {
    t.loaded_.source = kChatMlTemplateSource;
    t.loaded_.is_chatml_fallback = true;
    t.loaded_.origin = "chatml";
  } else {
    KV_ASSIGN_OR_RETURN(t.loaded_, LoadChatTemplate(model_path, template_file));
  }
  if (t.loaded_.bos_token.empty()) t.loaded_.bos_token = bos_text;
  if (t.loaded_.eos_token.empty()) t.loaded_.eos_token = eos_text;
  auto main = ChatTemplate::FromString(t.loaded_.source);
  if (!main.ok()) return main.status().WithContext("chat template (" + t.loaded_.origin + ")");
  t.main_ = MakeVariant(std::move(main).value());
  if (t.loaded_.tool_use_source) {
    auto tools = ChatTemplate::FromString(*t.loaded_.tool_use_source);
    if (!tools.ok()) return tools.status().WithContext("chat template (tool_use)");
    t.tool_use_ = MakeVariant(std::move(tools).value());
  }
  t.description_ = t.loaded_.is_chatml_fallback ? "ChatML (the model has none)"
                   : template_file.empty()       ? "the model's (" + t.loaded_.origin + ")"
                                                 : template_file;
  return t;
}

ModelChatTemplates::Variant ModelChatTemplates::MakeVariant(ChatTemplate tmpl) {
  const MessageContentForm content = DetectMessageContentForm(tmpl);
  const ToolCallArgumentsForm arguments = DetectToolCallArgumentsForm(tmpl);
  return Variant{std::move(tmpl), content, arguments};
}

StatusOr<std::string> ModelChatTemplates::Render(ChatTemplateInputs inputs) const {
  inputs.bos_token = loaded_.bos_token;
  inputs.eos_token = loaded_.eos_token;
  const bool tools = inputs.tools.has_value() && tool_use_.has_value();
  const Variant& v = tools ? *tool_use_ : *main_;
  NormalizeMessageContent(v.content_form, &inputs.messages);
  NormalizeToolCallArguments(v.arguments_form, &inputs.messages);
  return v.tmpl.Render(inputs);
}

}  // namespace kvserve

#include "chat/chat_template.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "base/check.h"
#include "model/gguf.h"

namespace kvserve {

const char kChatMlTemplateSource[] =
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

StatusOr<ChatTemplate> ChatTemplate::FromString(std::string source, const jinja::Options& options) {
  KV_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::Parse(source, options));
  return ChatTemplate(std::move(source), std::move(t));
}

StatusOr<std::string> ChatTemplate::Render(const ChatTemplateInputs& inputs) const {
  if (!inputs.messages.is_array()) return InvalidArgumentError("messages must be an array");
  using jinja::Value;
  Value ctx = Value::Dict();
  jinja::ValueDict& d = ctx.mutable_dict();
  d.Set(Value::String("messages"), Value::FromJson(inputs.messages));
  d.Set(Value::String("tools"), inputs.tools ? Value::FromJson(*inputs.tools) : Value::None());
  d.Set(Value::String("documents"), Value::None());
  d.Set(Value::String("add_generation_prompt"), Value::Bool(inputs.add_generation_prompt));
  d.Set(Value::String("bos_token"), Value::String(inputs.bos_token));
  d.Set(Value::String("eos_token"), Value::String(inputs.eos_token));
  if (inputs.extra.is_object()) {
    for (auto it = inputs.extra.begin(); it != inputs.extra.end(); ++it) {
      d.Set(Value::String(it.key()), Value::FromJson(it.value()));
    }
  } else if (!inputs.extra.is_null()) {
    return InvalidArgumentError("extra template variables must be an object");
  }
  return template_.Render(ctx, inputs.now_unix_seconds);
}

Status ParseConversationJson(const nlohmann::ordered_json& conversation, std::string_view source,
                             ChatTemplateInputs* inputs) {
  if (conversation.is_array()) {
    inputs->messages = conversation;
    return OkStatus();
  }
  if (!conversation.is_object() || !conversation.contains("messages") ||
      !conversation["messages"].is_array()) {
    return InvalidArgumentError(std::string(source) +
                                " must hold a JSON array of messages or an object with "
                                "\"messages\"");
  }
  inputs->messages = conversation["messages"];
  if (conversation.contains("tools") && !conversation["tools"].is_null()) {
    inputs->tools = conversation["tools"];
  }
  for (const char* key : {"chat_template_kwargs", "extra"}) {
    if (conversation.contains(key) && conversation[key].is_object()) {
      for (auto it = conversation[key].begin(); it != conversation[key].end(); ++it) {
        inputs->extra[it.key()] = it.value();
      }
    }
  }
  return OkStatus();
}

StatusOr<std::string> RenderOnce(const LoadedChatTemplate& loaded,
                                 const ChatTemplateInputs& inputs) {
  const bool has_tools = inputs.tools.has_value() && !inputs.tools->empty();
  KV_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::FromString(loaded.SourceFor(has_tools)));
  return tmpl.Render(inputs);
}

void NormalizeToolCallArguments(ToolCallArgumentsForm form, nlohmann::ordered_json* messages) {
  if (messages == nullptr || !messages->is_array()) return;
  for (auto& m : *messages) {
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (auto& call : m["tool_calls"]) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
      auto& fn = call["function"];
      if (!fn.contains("arguments")) continue;
      auto& args = fn["arguments"];
      if (form == ToolCallArgumentsForm::kObject && args.is_string()) {
        nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(args.get<std::string>(), nullptr, false);
        if (!parsed.is_discarded() && parsed.is_object()) args = std::move(parsed);
      } else if (form == ToolCallArgumentsForm::kString && !args.is_string()) {
        // json.dumps form via the interpreter's own serializer (Python separators and floats).
        StatusOr<std::string> text = jinja::ToJson(jinja::Value::FromJson(args), jinja::JsonDumpOptions{});
        if (text.ok()) args = *text;
      }
    }
  }
}

ToolCallArgumentsForm DetectToolCallArgumentsForm(const ChatTemplate& tmpl) {
  using ojson = nlohmann::ordered_json;
  static const ojson kProbe = ojson::parse(R"([
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call00001", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "sunny"},
    {"role": "user", "content": "Thanks"}])");
  static const ojson kTools = ojson::parse(R"([{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city.", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  ChatTemplateInputs in;
  in.tools = kTools;
  in.add_generation_prompt = true;
  in.now_unix_seconds = 0;
  in.messages = kProbe;
  if (tmpl.Render(in).ok()) return ToolCallArgumentsForm::kObject;
  NormalizeToolCallArguments(ToolCallArgumentsForm::kString, &in.messages);
  if (tmpl.Render(in).ok()) return ToolCallArgumentsForm::kString;
  return ToolCallArgumentsForm::kObject;
}

MessageContentForm DetectMessageContentForm(const ChatTemplate& tmpl) {
  ChatTemplateInputs in;
  in.now_unix_seconds = 0;
  in.messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": [{"type": "text", "text": "kvserve-probe-system"}]},
    {"role": "user", "content": [{"type": "text", "text": "kvserve-probe-user"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "kvserve-probe-assistant"}]},
    {"role": "user", "content": [{"type": "text", "text": "kvserve-probe-user2"}]}])");
  StatusOr<std::string> text = tmpl.Render(in);
  if (!text.ok() || text->find("'type'") != std::string::npos) return MessageContentForm::kString;
  for (const char* part : {"kvserve-probe-system", "kvserve-probe-user", "kvserve-probe-assistant"}) {
    if (text->find(part) == std::string::npos) return MessageContentForm::kString;
  }
  return MessageContentForm::kParts;
}

void NormalizeMessageContent(MessageContentForm form, nlohmann::ordered_json* messages) {
  if (messages == nullptr || !messages->is_array()) return;
  for (auto& m : *messages) {
    if (!m.is_object() || !m.contains("content")) continue;
    auto& content = m["content"];
    if (content.is_null()) {
      content = "";
    } else if (form == MessageContentForm::kString && content.is_array()) {
      std::string joined;
      bool first = true;
      for (const auto& part : content) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          continue;
        }
        if (!first) joined += "\n";
        joined += part["text"].get<std::string>();
        first = false;
      }
      content = joined;
    }
  }
}

ChatTemplate ChatMlTemplate() {
  StatusOr<ChatTemplate> t = ChatTemplate::FromString(kChatMlTemplateSource);
  KV_CHECK(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

namespace {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return DataLossError("error reading '" + path + "'");
  return ss.str();
}

bool HasGgufMagic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::string(magic, 4) == "GGUF";
}

// tokenizer_config.json special tokens are a string or {"content": string}.
std::string SpecialToken(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return "";
}

Status LoadFromGguf(const std::string& path, LoadedChatTemplate* out) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  StatusOr<std::string> t = file->GetString("tokenizer.chat_template");
  if (t.ok()) {
    out->source = *t;
    out->origin = "gguf";
  }
  const GgufValue* tokens = file->Find("tokenizer.ggml.tokens");
  auto token_text = [&](const char* key) -> std::string {
    StatusOr<int64_t> id = file->GetInt(key);
    if (!id.ok() || tokens == nullptr || tokens->type != GgufType::kArray ||
        tokens->array_type != GgufType::kString || *id < 0 ||
        *id >= static_cast<int64_t>(tokens->strings.size())) {
      return "";
    }
    return tokens->strings[*id];
  };
  out->bos_token = token_text("tokenizer.ggml.bos_token_id");
  out->eos_token = token_text("tokenizer.ggml.eos_token_id");
  return OkStatus();
}

Status LoadFromHfFolder(const std::string& dir, LoadedChatTemplate* out) {
  const std::string config_path = dir + "/tokenizer_config.json";
  if (Exists(config_path)) {
    KV_ASSIGN_OR_RETURN(std::string text, ReadText(config_path));
    nlohmann::json tc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (tc.is_discarded() || !tc.is_object()) {
      return InvalidArgumentError("'" + config_path + "' is not a JSON object");
    }
    if (tc.contains("bos_token")) out->bos_token = SpecialToken(tc["bos_token"]);
    if (tc.contains("eos_token")) out->eos_token = SpecialToken(tc["eos_token"]);
    if (tc.contains("chat_template")) {
      const nlohmann::json& t = tc["chat_template"];
      if (t.is_string()) {
        out->source = t.get<std::string>();
        out->origin = "tokenizer_config.json";
      } else if (t.is_array()) {
        for (const nlohmann::json& e : t) {
          if (!e.is_object() || !e.contains("name") || !e.contains("template") || !e["name"].is_string() ||
              !e["template"].is_string()) {
            continue;
          }
          const std::string name = e["name"].get<std::string>();
          if (name == "default") {
            out->source = e["template"].get<std::string>();
            out->origin = "tokenizer_config.json";
          } else if (name == "tool_use") {
            out->tool_use_source = e["template"].get<std::string>();
          }
        }
        if (out->source.empty() && out->tool_use_source) {
          out->source = *out->tool_use_source;
          out->origin = "tokenizer_config.json";
        }
      } else if (!t.is_null()) {
        return InvalidArgumentError("'" + config_path + "': chat_template is neither a string nor a list");
      }
    }
  }
  // Newer transformers save the template beside the config; it takes precedence.
  const std::string jinja_path = dir + "/chat_template.jinja";
  if (Exists(jinja_path)) {
    KV_ASSIGN_OR_RETURN(out->source, ReadText(jinja_path));
    out->origin = "chat_template.jinja";
  }
  return OkStatus();
}

}  // namespace

StatusOr<LoadedChatTemplate> LoadChatTemplate(const std::string& model_path,
                                              const std::string& template_file) {
  if (model_path.empty() && template_file.empty()) {
    return InvalidArgumentError("a model or a chat template file is needed");
  }
  LoadedChatTemplate out;
  if (!model_path.empty()) {
    if (IsDirectory(model_path)) {
      KV_RETURN_IF_ERROR(LoadFromHfFolder(model_path, &out));
    } else if (!Exists(model_path)) {
      return NotFoundError("model '" + model_path + "' not found");
    } else if (HasGgufMagic(model_path)) {
      KV_RETURN_IF_ERROR(LoadFromGguf(model_path, &out));
    }
    // llama2.c checkpoints carry no template.
  }
  if (!template_file.empty()) {
    KV_ASSIGN_OR_RETURN(out.source, ReadText(template_file));
    out.tool_use_source.reset();
    out.origin = "file";
  }
  if (out.source.empty()) {
    out.source = kChatMlTemplateSource;
    out.tool_use_source.reset();
    out.is_chatml_fallback = true;
    out.origin = "chatml";
  }
  return out;
}

}  // namespace kvserve

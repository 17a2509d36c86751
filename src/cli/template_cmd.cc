// `kvserve template`: renders a chat template on a conversation and prints the prompt exactly
// (no trailing newline added), for debugging what a model is fed.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "cli/cli_util.h"
#include "cli/commands.h"

namespace kvserve::cli {
namespace {

using ojson = nlohmann::ordered_json;

struct TemplateOptions {
  std::string model_path;
  std::string template_file;
  std::string messages_file;
  std::string tools_file;
  bool add_generation_prompt = false;
  bool raw_messages = false;  // pass the messages exactly as the file has them
  std::string bos_token;
  std::string eos_token;
  bool bos_given = false;
  bool eos_given = false;
};

StatusOr<ojson> ReadJson(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(std::string("cannot open ") + flag + " '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  ojson j = ojson::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError(std::string(flag) + " '" + path + "' is not valid JSON");
  return j;
}

int RunTemplate(const TemplateOptions& o) {
  StatusOr<LoadedChatTemplate> loaded = LoadChatTemplate(o.model_path, o.template_file);
  if (!loaded.ok()) return ReportError(loaded.status());
  if (loaded->is_chatml_fallback) {
    std::fprintf(stderr, "note: model '%s' has no chat template; using ChatML\n", o.model_path.c_str());
  }
  StatusOr<ojson> messages = ReadJson(o.messages_file, "--messages");
  if (!messages.ok()) return ReportError(messages.status());
  ChatTemplateInputs in;
  if (Status s = ParseConversationJson(*messages, "--messages", &in); !s.ok()) {
    return ReportError(s);
  }
  if (!o.tools_file.empty()) {
    StatusOr<ojson> tools = ReadJson(o.tools_file, "--tools");
    if (!tools.ok()) return ReportError(tools.status());
    if (!tools->is_array()) return ReportError(InvalidArgumentError("--tools must hold a JSON array"));
    in.tools = *tools;
  }
  if (!o.raw_messages) {
    // As the server does: content null -> "", part lists joined for string-only templates,
    // tool-call arguments as objects (OpenAI's JSON strings parsed) or as strings for the
    // templates that concatenate them.
    const bool has_tools = in.tools.has_value() && !in.tools->empty();
    StatusOr<ChatTemplate> tmpl = ChatTemplate::FromString(loaded->SourceFor(has_tools));
    if (!tmpl.ok()) return ReportError(tmpl.status());
    NormalizeMessageContent(DetectMessageContentForm(*tmpl), &in.messages);
    NormalizeToolCallArguments(DetectToolCallArgumentsForm(*tmpl), &in.messages);
  }
  in.add_generation_prompt = o.add_generation_prompt;
  in.bos_token = o.bos_given ? o.bos_token : loaded->bos_token;
  in.eos_token = o.eos_given ? o.eos_token : loaded->eos_token;
  StatusOr<std::string> prompt = RenderOnce(*loaded, in);
  if (!prompt.ok()) return ReportError(prompt.status());
  std::fwrite(prompt->data(), 1, prompt->size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace

void AddTemplateCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<TemplateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "template",
      "Render a chat template on a conversation and print the prompt exactly as the model "
      "would get it (nothing added, no trailing newline).");
  auto* model = cmd->add_option("-m,--model", opts->model_path,
                                "Model whose template to use (GGUF file or Hugging Face folder; "
                                "without a template: ChatML)");
  auto* file = cmd->add_option("--chat-template", opts->template_file,
                               "Jinja template file to use instead of the model's");
  cmd->add_option("--messages", opts->messages_file,
                  "JSON file: an array of messages, or an object with \"messages\" (and optional "
                  "\"tools\", \"chat_template_kwargs\")")
      ->required();
  cmd->add_option("--tools", opts->tools_file, "JSON file with an array of tools (OpenAI format)");
  cmd->add_flag("--add-generation-prompt", opts->add_generation_prompt,
                "End with the assistant header, as for a chat completion");
  cmd->add_flag("--raw-messages", opts->raw_messages,
                "Pass the messages exactly as the file has them, as transformers' "
                "apply_chat_template does (default: as the server passes them: null content as "
                "\"\", part lists joined for string-only templates, tool-call arguments as "
                "objects, or as JSON strings for templates that concatenate them)");
  auto* bos = cmd->add_option("--bos-token", opts->bos_token, "bos_token text (default: the model's)");
  auto* eos = cmd->add_option("--eos-token", opts->eos_token, "eos_token text (default: the model's)");
  cmd->callback([opts, exit_code, model, file, bos, eos]() {
    if (model->count() == 0 && file->count() == 0) {
      *exit_code = ReportError(InvalidArgumentError("pass --model PATH or --chat-template FILE"));
      return;
    }
    opts->bos_given = bos->count() > 0;
    opts->eos_given = eos->count() > 0;
    *exit_code = RunTemplate(*opts);
  });
}

}  // namespace kvserve::cli

#include "promptlint/request_file.h"

#include <algorithm>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

namespace kvserve::promptlint {
namespace {

using ojson = nlohmann::ordered_json;

std::string LinePrefix(int64_t line) { return "line " + std::to_string(line) + ": "; }

Status LineError(int64_t line, const std::string& message) {
  return InvalidArgumentError(LinePrefix(line) + message);
}

bool IsBlank(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; });
}

// A token id from JSON: an integer in [0, INT32_MAX].
bool ReadTokenId(const ojson& v, TokenId* out) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<TokenId>::max())) return false;
    *out = static_cast<TokenId>(u);
    return true;
  }
  const int64_t s = v.get<int64_t>();
  if (s < 0 || s > std::numeric_limits<TokenId>::max()) return false;
  *out = static_cast<TokenId>(s);
  return true;
}

Status ReadIds(const ojson& arr, int64_t line, std::vector<TokenId>* ids) {
  for (const ojson& v : arr) {
    TokenId t = 0;
    if (!ReadTokenId(v, &t)) {
      return LineError(line, "\"prompt\" token ids must be integers in [0, 2147483647]");
    }
    ids->push_back(t);
  }
  return OkStatus();
}

Status ParsePrompt(const ojson& p, int64_t line, std::vector<CompletionPrompt>* out) {
  static const char kShape[] =
      "\"prompt\" must be a string, a list of strings, a list of token ids or a list of lists "
      "of token ids";
  if (p.is_string()) {
    out->push_back({p.get<std::string>(), {}});
    return OkStatus();
  }
  if (!p.is_array() || p.empty()) return LineError(line, kShape);
  if (p[0].is_string()) {
    for (const ojson& s : p) {
      if (!s.is_string()) return LineError(line, kShape);
      out->push_back({s.get<std::string>(), {}});
    }
  } else if (p[0].is_array()) {
    for (const ojson& ids : p) {
      if (!ids.is_array()) return LineError(line, kShape);
      CompletionPrompt c;
      KV_RETURN_IF_ERROR(ReadIds(ids, line, &c.ids));
      out->push_back(std::move(c));
    }
  } else if (p[0].is_number()) {
    CompletionPrompt c;
    KV_RETURN_IF_ERROR(ReadIds(p, line, &c.ids));
    out->push_back(std::move(c));
  } else {
    return LineError(line, kShape);
  }
  return OkStatus();
}

Status ParseMessages(const ojson& body, int64_t line, RequestBody* r) {
  const ojson& messages = body["messages"];
  if (!messages.is_array() || messages.empty()) {
    return LineError(line, "\"messages\" must be a non-empty array of messages");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ojson& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return LineError(line, where + " must be an object");
    if (!m.contains("role") || !m["role"].is_string()) {
      return LineError(line, where + ".role must be a string");
    }
  }
  if (body.contains("tools") && !body["tools"].is_null() && !body["tools"].is_array()) {
    return LineError(line, "\"tools\" must be an array");
  }
  if (body.contains("chat_template_kwargs") && !body["chat_template_kwargs"].is_object()) {
    return LineError(line, "\"chat_template_kwargs\" must be an object");
  }
  if (Status s = ParseConversationJson(body, "the request", &r->chat_inputs); !s.ok()) {
    return LineError(line, s.message());
  }
  r->chat_inputs.add_generation_prompt = true;  // the API's default
  if (body.contains("add_generation_prompt")) {
    if (!body["add_generation_prompt"].is_boolean()) {
      return LineError(line, "\"add_generation_prompt\" must be true or false");
    }
    r->chat_inputs.add_generation_prompt = body["add_generation_prompt"].get<bool>();
  }
  return OkStatus();
}

StatusOr<RequestBody> ParseLine(std::string_view text, int64_t line) {
  if (JsonNestingDepth(text, kMaxRequestNestingDepth) > kMaxRequestNestingDepth) {
    return LineError(line, "JSON nested more than " + std::to_string(kMaxRequestNestingDepth) +
                               " levels deep");
  }
  ojson body;
  try {
    body = ojson::parse(text);
  } catch (const ojson::exception& e) {
    return LineError(line, std::string("not valid JSON (") + e.what() + ")");
  }
  if (!body.is_object()) return LineError(line, "expected a JSON object (an OpenAI request body)");
  RequestBody r;
  r.line = line;
  const bool has_messages = body.contains("messages");
  const bool has_prompt = body.contains("prompt");
  if (has_messages == has_prompt) {
    return LineError(line, has_messages
                               ? "has both \"messages\" and \"prompt\"; a request is chat or "
                                 "completions"
                               : "needs \"messages\" (a chat request) or \"prompt\" (a "
                                 "completions request)");
  }
  if (body.contains("cache_salt")) {
    if (!body["cache_salt"].is_string() || body["cache_salt"].get<std::string>().empty()) {
      return LineError(line, "\"cache_salt\" must be a non-empty string");
    }
    r.cache_salt = body["cache_salt"].get<std::string>();
  }
  r.chat = has_messages;
  if (r.chat) {
    KV_RETURN_IF_ERROR(ParseMessages(body, line, &r));
  } else {
    KV_RETURN_IF_ERROR(ParsePrompt(body["prompt"], line, &r.prompts));
  }
  return r;
}

}  // namespace

StatusOr<std::vector<RequestBody>> ParseRequestFile(std::string_view text) {
  std::vector<RequestBody> out;
  int64_t line = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view l = text.substr(pos, end - pos);
    pos = end + 1;
    ++line;
    if (line == 1 && l.substr(0, 3) == "\xEF\xBB\xBF") l.remove_prefix(3);  // UTF-8 BOM
    if (IsBlank(l)) continue;
    KV_ASSIGN_OR_RETURN(RequestBody r, ParseLine(l, line));
    out.push_back(std::move(r));
  }
  if (out.empty()) return InvalidArgumentError("the file holds no request (one JSON object per line)");
  return out;
}

StatusOr<std::vector<LintPrompt>> EncodeRequests(const std::vector<RequestBody>& requests,
                                                 const PromptEncoder& encoder) {
  if (encoder.tokenizer == nullptr) return InvalidArgumentError("no tokenizer");
  const Tokenizer& tok = *encoder.tokenizer;
  std::vector<LintPrompt> out;
  for (const RequestBody& r : requests) {
    if (r.chat) {
      if (encoder.chat_templates == nullptr) {
        return LineError(r.line, "a chat request, and there is no chat template");
      }
      StatusOr<std::string> text = encoder.chat_templates->Render(r.chat_inputs);
      if (!text.ok()) return LineError(r.line, "chat template: " + text.status().message());
      LintPrompt p;
      p.line = r.line;
      p.cache_namespace = r.cache_salt;
      p.tokens = tok.Encode(*text, EncodeOptions{.add_bos = false, .parse_special = true});
      if (p.tokens.empty()) return LineError(r.line, "the rendered conversation is empty");
      out.push_back(std::move(p));
      continue;
    }
    for (const CompletionPrompt& c : r.prompts) {
      LintPrompt p;
      p.line = r.line;
      p.cache_namespace = r.cache_salt;
      if (c.text.has_value()) {
        p.tokens = tok.Encode(*c.text, EncodeOptions{.add_bos = true, .parse_special = true});
      } else {
        for (TokenId t : c.ids) {
          if (t >= tok.vocab_size()) {
            return LineError(r.line, "prompt token id " + std::to_string(t) +
                                         " is outside the vocabulary (" +
                                         std::to_string(tok.vocab_size()) + " tokens)");
          }
        }
        p.tokens = c.ids;
      }
      if (p.tokens.empty()) return LineError(r.line, "the prompt is empty");
      out.push_back(std::move(p));
    }
  }
  return out;
}

}  // namespace kvserve::promptlint

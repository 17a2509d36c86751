#include "server/openai_api.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

namespace kvserve::openai {
namespace {

// Field readers: absent or null leaves *out unchanged; a wrong type or range is an error that
// names the field.
class Reader {
 public:
  Reader(const Json& body, ParamError* error) : body_(body), error_(error) {}

  bool has(const char* key) const { return body_.contains(key) && !body_.at(key).is_null(); }
  const Json& at(const char* key) const { return body_.at(key); }

  Status fail(const std::string& param, const std::string& message) {
    if (error_ != nullptr) *error_ = {param, message, ""};
    return InvalidArgumentError(message);
  }

  Status Bool(const char* key, bool* out) {
    if (!has(key)) return OkStatus();
    if (!at(key).is_boolean()) return fail(key, std::string("'") + key + "' must be a boolean");
    *out = at(key).get<bool>();
    return OkStatus();
  }
  Status Int(const char* key, int64_t lo, int64_t hi, int64_t* out) {
    if (!has(key)) return OkStatus();
    const Json& v = at(key);
    int64_t x = 0;
    if (v.is_number_integer()) {
      x = v.get<int64_t>();
    } else if (v.is_number_float() && std::isfinite(v.get<double>()) &&
               v.get<double>() == std::floor(v.get<double>()) &&
               std::fabs(v.get<double>()) < 9e15) {
      x = static_cast<int64_t>(v.get<double>());
    } else {
      return fail(key, std::string("'") + key + "' must be an integer");
    }
    if (x < lo || x > hi) {
      return fail(key, std::string("'") + key + "' must be between " + std::to_string(lo) +
                           " and " + std::to_string(hi) + ", got " + std::to_string(x));
    }
    *out = x;
    return OkStatus();
  }
  Status Float(const char* key, double lo, double hi, float* out) {
    if (!has(key)) return OkStatus();
    const Json& v = at(key);
    if (!v.is_number()) return fail(key, std::string("'") + key + "' must be a number");
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) {
      return fail(key, std::string("'") + key + "' must be between " + Fmt(lo) + " and " +
                           Fmt(hi) + ", got " + Fmt(x));
    }
    *out = static_cast<float>(x);
    return OkStatus();
  }
  Status String(const char* key, std::string* out) {
    if (!has(key)) return OkStatus();
    if (!at(key).is_string()) return fail(key, std::string("'") + key + "' must be a string");
    *out = at(key).get<std::string>();
    return OkStatus();
  }
  Status TokenIds(const char* key, std::vector<TokenId>* out) {
    if (!has(key)) return OkStatus();
    const Json& v = at(key);
    if (!v.is_array()) return fail(key, std::string("'") + key + "' must be an array of token ids");
    for (const Json& t : v) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
          t.get<int64_t>() > std::numeric_limits<TokenId>::max()) {
        return fail(key, std::string("'") + key + "' must hold non-negative integer token ids");
      }
      out->push_back(static_cast<TokenId>(t.get<int64_t>()));
    }
    return OkStatus();
  }

  static std::string Fmt(double x) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", x);
    return buf;
  }

 private:
  const Json& body_;
  ParamError* error_;
};

// The structured-output fields (GenerationParams::guided): at most one may be given.
Status ParseGuided(Reader& r, GenerationParams* p) {
  using grammar::GrammarKind;
  auto set = [&](const char* param, GrammarKind kind, std::string text) -> Status {
    if (p->guided.has_value()) {
      return r.fail(param, std::string("'") + param + "' and '" + p->guided_param +
                               "' both constrain the output; give one of them");
    }
    p->guided = grammar::GrammarSpec{kind, std::move(text)};
    p->guided_param = param;
    return OkStatus();
  };
  // A schema given as an object or as its JSON text.
  auto schema_text = [&](const char* param, const Json& v, std::string* text) -> Status {
    if (v.is_object() || v.is_boolean()) {
      *text = v.dump();
    } else if (v.is_string()) {
      *text = v.get<std::string>();
    } else {
      return r.fail(param, std::string("'") + param + "' must be a JSON schema (an object)");
    }
    return OkStatus();
  };
  if (r.has("response_format")) {
    const Json& rf = r.at("response_format");
    const std::string type = rf.is_object() && rf.contains("type") && rf["type"].is_string()
                                 ? rf["type"].get<std::string>()
                                 : "";
    if (type == "json_object") {
      KV_RETURN_IF_ERROR(set("response_format", GrammarKind::kJsonObject, ""));
    } else if (type == "json_schema") {
      const Json* js = rf.contains("json_schema") ? &rf["json_schema"] : nullptr;
      if (js == nullptr || !js->is_object() || !js->contains("schema")) {
        return r.fail("response_format.json_schema",
                      "'response_format' of type json_schema needs 'json_schema': {\"name\": "
                      "..., \"schema\": {...}}");
      }
      std::string text;
      KV_RETURN_IF_ERROR(schema_text("response_format.json_schema.schema", (*js)["schema"], &text));
      KV_RETURN_IF_ERROR(set("response_format", GrammarKind::kJsonSchema, std::move(text)));
    } else if (type != "text") {
      return r.fail("response_format",
                    "'response_format' must be {\"type\": \"text\"}, {\"type\": "
                    "\"json_object\"} or {\"type\": \"json_schema\", \"json_schema\": {...}}");
    }
  }
  for (const char* key : {"guided_json", "json_schema"}) {
    if (!r.has(key)) continue;
    std::string text;
    KV_RETURN_IF_ERROR(schema_text(key, r.at(key), &text));
    KV_RETURN_IF_ERROR(set(key, GrammarKind::kJsonSchema, std::move(text)));
  }
  if (r.has("guided_regex")) {
    if (!r.at("guided_regex").is_string()) return r.fail("guided_regex", "'guided_regex' must be a string");
    KV_RETURN_IF_ERROR(set("guided_regex", GrammarKind::kRegex, r.at("guided_regex").get<std::string>()));
  }
  if (r.has("guided_choice")) {
    const Json& v = r.at("guided_choice");
    bool strings = v.is_array() && !v.empty();
    for (const Json& x : v) strings = strings && x.is_string();
    if (!strings) return r.fail("guided_choice", "'guided_choice' must be a non-empty array of strings");
    KV_RETURN_IF_ERROR(set("guided_choice", GrammarKind::kChoice, v.dump()));
  }
  for (const char* key : {"guided_grammar", "grammar"}) {
    if (!r.has(key)) continue;
    if (!r.at(key).is_string()) return r.fail(key, std::string("'") + key + "' must be a string (GBNF)");
    KV_RETURN_IF_ERROR(set(key, GrammarKind::kGbnf, r.at(key).get<std::string>()));
  }
  return OkStatus();
}

// Fields shared by both endpoints. max_tokens_keys: the names that set max_tokens.
Status ParseGenerationParams(const Json& body, Reader& r, bool chat, GenerationParams* p) {
  KV_RETURN_IF_ERROR(r.String("model", &p->model));
  KV_RETURN_IF_ERROR(r.Int("n", 1, kMaxN, &p->n));
  p->best_of = p->n;
  KV_RETURN_IF_ERROR(r.Int("best_of", 1, kMaxN, &p->best_of));
  if (p->best_of < p->n) return r.fail("best_of", "'best_of' must be at least n");
  int64_t max_tokens = -1;
  // 0 is for completions with echo (checked by ParseCompletionRequest).
  KV_RETURN_IF_ERROR(
      r.Int("max_tokens", chat ? 1 : 0, std::numeric_limits<int32_t>::max(), &max_tokens));
  if (chat) {
    KV_RETURN_IF_ERROR(r.Int("max_completion_tokens", 1, std::numeric_limits<int32_t>::max(),
                             &max_tokens));
  }
  if (max_tokens >= 0) p->max_tokens = max_tokens;

  SamplingParams& s = p->sampling;
  KV_RETURN_IF_ERROR(r.Float("temperature", 0.0, 100.0, &s.temperature));
  KV_RETURN_IF_ERROR(r.Float("top_p", 1e-9, 1.0, &s.top_p));
  int64_t top_k = 0;
  KV_RETURN_IF_ERROR(r.Int("top_k", -1, std::numeric_limits<int32_t>::max(), &top_k));
  s.top_k = static_cast<int32_t>(top_k);
  KV_RETURN_IF_ERROR(r.Float("min_p", 0.0, 1.0, &s.min_p));
  KV_RETURN_IF_ERROR(r.Float("presence_penalty", -2.0, 2.0, &s.presence_penalty));
  KV_RETURN_IF_ERROR(r.Float("frequency_penalty", -2.0, 2.0, &s.frequency_penalty));
  KV_RETURN_IF_ERROR(r.Float("repetition_penalty", 1e-6, 100.0, &s.repetition_penalty));
  if (r.has("seed")) {
    int64_t seed = 0;
    KV_RETURN_IF_ERROR(r.Int("seed", std::numeric_limits<int64_t>::min(),
                             std::numeric_limits<int64_t>::max(), &seed));
    s.seed = static_cast<uint64_t>(seed);
    p->seed_given = true;
  }

  if (r.has("stop")) {
    const Json& v = r.at("stop");
    if (v.is_string()) {
      if (!v.get<std::string>().empty()) p->stop.push_back(v.get<std::string>());
    } else if (v.is_array()) {
      for (const Json& x : v) {
        if (!x.is_string()) return r.fail("stop", "'stop' must be a string or an array of strings");
        if (!x.get<std::string>().empty()) p->stop.push_back(x.get<std::string>());
      }
    } else {
      return r.fail("stop", "'stop' must be a string or an array of strings");
    }
  }
  KV_RETURN_IF_ERROR(r.TokenIds("stop_token_ids", &p->stop_token_ids));

  if (chat) {
    bool logprobs = false;
    KV_RETURN_IF_ERROR(r.Bool("logprobs", &logprobs));
    int64_t top = 0;
    KV_RETURN_IF_ERROR(r.Int("top_logprobs", 0, kMaxLogprobs, &top));
    if (r.has("top_logprobs") && !logprobs) {
      return r.fail("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
    if (logprobs) p->logprobs = static_cast<int32_t>(top);
  } else {
    int64_t logprobs = -1;
    KV_RETURN_IF_ERROR(r.Int("logprobs", 0, kMaxLogprobs, &logprobs));
    p->logprobs = static_cast<int32_t>(logprobs);
  }

  KV_RETURN_IF_ERROR(r.Bool("stream", &p->stream));
  if (r.has("stream_options")) {
    const Json& so = r.at("stream_options");
    if (!so.is_object()) return r.fail("stream_options", "'stream_options' must be an object");
    if (!p->stream) {
      return r.fail("stream_options", "'stream_options' is only allowed with 'stream': true");
    }
    Reader sr(so, nullptr);
    Status st = sr.Bool("include_usage", &p->include_usage);
    if (!st.ok()) return r.fail("stream_options.include_usage", st.message());
  }
  if (p->stream && p->best_of > p->n) {
    return r.fail("best_of", "'best_of' greater than n cannot be streamed (the best are chosen "
                             "at the end)");
  }
  KV_RETURN_IF_ERROR(r.Bool("ignore_eos", &p->ignore_eos));
  KV_RETURN_IF_ERROR(r.Int("priority", std::numeric_limits<int32_t>::min(),
                           std::numeric_limits<int32_t>::max(), &p->priority));
  KV_RETURN_IF_ERROR(r.String("cache_salt", &p->cache_salt));
  if (r.has("cache_salt") && p->cache_salt.empty()) {
    return r.fail("cache_salt", "'cache_salt' must not be empty");
  }
  if (r.has("kv_policy")) {
    const Json& kp = r.at("kv_policy");
    if (!kp.is_object()) return r.fail("kv_policy", "'kv_policy' must be an object");
    GenerationParams::KvPolicyFields f;
    for (auto it = kp.begin(); it != kp.end(); ++it) {
      const std::string& key = it.key();
      const std::string param = "kv_policy." + key;
      if (key == "method") {
        if (!it->is_string()) return r.fail(param, "'" + param + "' must be a string");
        f.method = it->get<std::string>();
        continue;
      }
      std::optional<int64_t>* field = key == "budget_tokens"        ? &f.budget_tokens
                                      : key == "sink_tokens"        ? &f.sink_tokens
                                      : key == "window_tokens"      ? &f.window_tokens
                                      : key == "observation_window" ? &f.observation_window
                                                                    : nullptr;
      if (field == nullptr) {
        return r.fail(param, "unknown field '" + param + "' (method, budget_tokens, "
                             "sink_tokens, window_tokens, observation_window)");
      }
      if (!it->is_number_integer()) return r.fail(param, "'" + param + "' must be an integer");
      *field = it->get<int64_t>();
    }
    p->kv_policy = f;
  }
  if (r.has("semantic_cache")) {
    const Json& sc = r.at("semantic_cache");
    if (!sc.is_object()) return r.fail("semantic_cache", "'semantic_cache' must be an object");
    GenerationParams::SemanticCacheFields f;
    for (auto it = sc.begin(); it != sc.end(); ++it) {
      const std::string param = "semantic_cache." + it.key();
      if (it.key() == "mode") {
        const std::string mode = it->is_string() ? it->get<std::string>() : "";
        if (mode != "on" && mode != "off" && mode != "exact") {
          return r.fail(param, "'" + param + "' must be \"on\", \"off\" or \"exact\"");
        }
        f.mode = mode;
      } else if (it.key() == "threshold") {
        if (!it->is_number() || it->get<double>() < 0.0 || it->get<double>() > 1.0) {
          return r.fail(param, "'" + param + "' must be a number between 0 and 1");
        }
        f.threshold = it->get<float>();
      } else {
        return r.fail(param, "unknown field '" + param + "' (mode, threshold)");
      }
    }
    p->semantic_cache = f;
  }
  return ParseGuided(r, p);
}

Status CheckObject(const Json& body, ParamError* error) {
  if (!body.is_object()) {
    if (error != nullptr) *error = {"", "the request body must be a JSON object", ""};
    return InvalidArgumentError("the request body must be a JSON object");
  }
  return OkStatus();
}

}  // namespace

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

StatusOr<Json> ParseJsonObject(std::string_view body) {
  if (JsonNestingDepth(body, kMaxJsonNestingDepth) > kMaxJsonNestingDepth) {
    return InvalidArgumentError("the request body nests JSON arrays or objects more than " +
                                std::to_string(kMaxJsonNestingDepth) + " levels deep");
  }
  Json json = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return InvalidArgumentError("the request body is not valid JSON");
  if (!json.is_object()) return InvalidArgumentError("the request body is not a JSON object");
  return json;
}

StatusOr<CompletionRequest> ParseCompletionRequest(const Json& body, ParamError* error) {
  KV_RETURN_IF_ERROR(CheckObject(body, error));
  Reader r(body, error);
  CompletionRequest req;
  KV_RETURN_IF_ERROR(ParseGenerationParams(body, r, /*chat=*/false, &req.params));
  KV_RETURN_IF_ERROR(r.Bool("echo", &req.echo));
  if (req.params.max_tokens == 0 && !req.echo) {
    return r.fail("max_tokens", "'max_tokens' must be at least 1 (0 only with 'echo': true, "
                                "which scores the prompt)");
  }
  if (r.has("suffix")) return r.fail("suffix", "'suffix' is not supported");
  if (!r.has("prompt")) return r.fail("prompt", "'prompt' is required");
  const Json& p = r.at("prompt");
  const char* kShape =
      "'prompt' must be a string, an array of token ids, or an array of strings or of token-id "
      "arrays";
  auto ids_of = [&](const Json& arr, PromptInput* out) -> Status {
    for (const Json& t : arr) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
          t.get<int64_t>() > std::numeric_limits<TokenId>::max()) {
        return r.fail("prompt", kShape);
      }
      out->ids.push_back(static_cast<TokenId>(t.get<int64_t>()));
    }
    return OkStatus();
  };
  if (p.is_string()) {
    req.prompts.push_back({p.get<std::string>(), {}});
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    PromptInput in;
    KV_RETURN_IF_ERROR(ids_of(p, &in));
    req.prompts.push_back(std::move(in));
  } else if (p.is_array() && !p.empty()) {
    for (const Json& x : p) {
      if (x.is_string()) {
        req.prompts.push_back({x.get<std::string>(), {}});
      } else if (x.is_array()) {
        PromptInput in;
        KV_RETURN_IF_ERROR(ids_of(x, &in));
        req.prompts.push_back(std::move(in));
      } else {
        return r.fail("prompt", kShape);
      }
    }
  } else {
    return r.fail("prompt", p.is_array() ? "'prompt' must not be empty" : kShape);
  }
  for (const PromptInput& in : req.prompts) {
    if (in.text.has_value() ? in.text->empty() : in.ids.empty()) {
      return r.fail("prompt", "'prompt' must not be empty");
    }
  }
  if (static_cast<int64_t>(req.prompts.size()) * req.params.best_of > kMaxN) {
    return r.fail(req.params.best_of > req.params.n ? "best_of" : "n",
                  "prompts x max(n, best_of) must be at most " + std::to_string(kMaxN));
  }
  return req;
}

namespace {

// tools, tool_choice, parallel_tool_calls (ChatRequest's fields).
Status ParseTools(Reader& r, ChatRequest* req) {
  std::vector<std::string> names;
  if (r.has("tools")) {
    const Json& tools = r.at("tools");
    if (!tools.is_array()) return r.fail("tools", "'tools' must be an array");
    for (size_t i = 0; i < tools.size(); ++i) {
      const Json& t = tools[i];
      const std::string where = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") ||
          !t["function"].is_object()) {
        return r.fail(where, where + " must be {\"type\": \"function\", \"function\": {...}}");
      }
      const Json& fn = t["function"];
      if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get<std::string>().empty()) {
        return r.fail(where + ".function.name", where + ".function.name must be a non-empty string");
      }
      const std::string name = fn["name"].get<std::string>();
      if (std::find(names.begin(), names.end(), name) != names.end()) {
        return r.fail(where + ".function.name", "two tools are named '" + name + "'");
      }
      names.push_back(name);
      if (fn.contains("parameters") && !fn["parameters"].is_object() && !fn["parameters"].is_null()) {
        return r.fail(where + ".function.parameters",
                      where + ".function.parameters must be a JSON schema (an object)");
      }
    }
    req->tools = tools;
  }
  req->tool_choice = names.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  if (r.has("tool_choice")) {
    const Json& v = r.at("tool_choice");
    const char* kShape =
        "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
        "\"function\": {\"name\": ...}}";
    if (v.is_string()) {
      const std::string s = v.get<std::string>();
      if (s == "none") {
        req->tool_choice = ToolChoice::kNone;
      } else if (s == "auto") {
        req->tool_choice = ToolChoice::kAuto;
      } else if (s == "required") {
        req->tool_choice = ToolChoice::kRequired;
      } else {
        return r.fail("tool_choice", kShape);
      }
    } else if (v.is_object() && v.value("type", "") == "function" && v.contains("function") &&
               v["function"].is_object() && v["function"].contains("name") &&
               v["function"]["name"].is_string()) {
      req->tool_choice = ToolChoice::kFunction;
      req->tool_choice_function = v["function"]["name"].get<std::string>();
      if (std::find(names.begin(), names.end(), req->tool_choice_function) == names.end()) {
        return r.fail("tool_choice", "tool_choice names the function '" +
                                         req->tool_choice_function + "', which is not in 'tools'");
      }
    } else {
      return r.fail("tool_choice", kShape);
    }
    if (names.empty() && req->tool_choice != ToolChoice::kNone) {
      return r.fail("tool_choice", "'tool_choice' other than \"none\" needs 'tools'");
    }
  }
  KV_RETURN_IF_ERROR(r.Bool("parallel_tool_calls", &req->parallel_tool_calls));
  return OkStatus();
}

}  // namespace

const char* ToolChoiceName(ToolChoice choice) {
  switch (choice) {
    case ToolChoice::kNone: return "none";
    case ToolChoice::kAuto: return "auto";
    case ToolChoice::kRequired: return "required";
    case ToolChoice::kFunction: return "function";
  }
  return "";
}

StatusOr<ChatRequest> ParseChatRequest(const Json& body, ParamError* error) {
  KV_RETURN_IF_ERROR(CheckObject(body, error));
  Reader r(body, error);
  ChatRequest req;
  KV_RETURN_IF_ERROR(ParseGenerationParams(body, r, /*chat=*/true, &req.params));
  if (!r.has("messages")) return r.fail("messages", "'messages' is required");
  const Json& msgs = r.at("messages");
  if (!msgs.is_array() || msgs.empty()) {
    return r.fail("messages", "'messages' must be a non-empty array");
  }
  req.messages = Json::array();
  for (size_t i = 0; i < msgs.size(); ++i) {
    const Json& m = msgs[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return r.fail(where, where + " must be an object");
    if (!m.contains("role") || !m["role"].is_string()) {
      return r.fail(where + ".role", where + ".role must be a string");
    }
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" &&
        role != "developer" && role != "function") {
      return r.fail(where + ".role", where + ".role '" + role + "' is not one of system, "
                    "developer, user, assistant, tool");
    }
    if (m.contains("content")) {
      const Json& c = m["content"];
      if (c.is_array()) {
        // Content parts: only text parts can be rendered (the chat template's renderer joins
        // them for templates that take strings).
        for (const Json& part : c) {
          if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
              !part["text"].is_string()) {
            return r.fail(where + ".content",
                          where + ".content: only text parts ({\"type\": \"text\"}) are supported");
          }
        }
      } else if (!c.is_string() && !c.is_null()) {
        return r.fail(where + ".content", where + ".content must be a string or an array of parts");
      }
    }
    // As OpenAI: content may be absent or null only in an assistant message with tool calls.
    const bool calls_tools = role == "assistant" && (m.contains("tool_calls") ||
                                                     m.contains("function_call"));
    if ((!m.contains("content") || m["content"].is_null()) && !calls_tools) {
      return r.fail(where + ".content",
                    where + ".content is required (a string or an array of text parts; only an "
                            "assistant message with tool_calls may leave it out or null)");
    }
    // Tool-call arguments arrive as JSON strings; the chat template's renderer turns them
    // into what the template expects (NormalizeToolCallArguments).
    req.messages.push_back(m);
  }
  KV_RETURN_IF_ERROR(ParseTools(r, &req));
  KV_RETURN_IF_ERROR(r.Bool("add_generation_prompt", &req.add_generation_prompt));
  if (r.has("chat_template_kwargs")) {
    if (!r.at("chat_template_kwargs").is_object()) {
      return r.fail("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    }
    req.chat_template_kwargs = r.at("chat_template_kwargs");
  }
  return req;
}

Json ErrorBody(int http_status, const std::string& message, const std::string& param,
               const std::string& code) {
  std::string type = "server_error";
  if (http_status == 400 || http_status == 413 || http_status == 422) type = "invalid_request_error";
  if (http_status == 401) type = "authentication_error";
  if (http_status == 404) type = "not_found_error";
  if (http_status == 503) type = "service_unavailable";
  Json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return Json{{"error", e}};
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Json Usage(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens,
           int64_t kv_tokens_evicted, const int64_t* cached_by_tier) {
  Json details = {{"cached_tokens", cached_tokens}};
  if (cached_by_tier != nullptr) {
    details["cached_tokens_by_tier"] = {{"memory", cached_by_tier[0]},
                                        {"disk", cached_by_tier[1]},
                                        {"redis", cached_by_tier[2]}};
  }
  return Json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens},
              {"prompt_tokens_details", details},
              {"kv_tokens_evicted", kv_tokens_evicted}};
}

namespace {
Json Bytes(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}
double Logprob(float lp) {
  // JSON has no -inf; clamp as vLLM does.
  return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0;
}
}  // namespace

Json ChatLogprobEntry(const TokenText& sampled, const std::vector<TokenText>& top) {
  Json tops = Json::array();
  for (const TokenText& t : top) {
    tops.push_back({{"token", t.text}, {"logprob", Logprob(t.logprob)}, {"bytes", Bytes(t.text)}});
  }
  return Json{{"token", sampled.text},
              {"logprob", Logprob(sampled.logprob)},
              {"bytes", Bytes(sampled.text)},
              {"top_logprobs", tops}};
}

void CompletionLogprobs::add(const TokenText& sampled, const std::vector<TokenText>& top,
                             int64_t text_offset) {
  tokens_.push_back(sampled.text);
  token_logprobs_.push_back(Logprob(sampled.logprob));
  Json tops = Json::object();
  for (const TokenText& t : top) {
    if (!tops.contains(t.text)) tops[t.text] = Logprob(t.logprob);
  }
  top_logprobs_.push_back(tops);
  text_offset_.push_back(text_offset);
}

void CompletionLogprobs::add_unscored(const std::string& text, int64_t text_offset) {
  tokens_.push_back(text);
  token_logprobs_.push_back(nullptr);
  top_logprobs_.push_back(nullptr);
  text_offset_.push_back(text_offset);
}

Json CompletionLogprobs::json() const {
  return Json{{"tokens", tokens_},
              {"token_logprobs", token_logprobs_},
              {"top_logprobs", top_logprobs_},
              {"text_offset", text_offset_}};
}

}  // namespace kvserve::openai

#include "server/response_cache.h"

#include <utility>

namespace kvserve {

using openai::Json;

namespace {

bool IsSystem(const Json& m) {
  const std::string role = m.value("role", "");
  return role == "system" || role == "developer";
}

// A message's content as text (strings, or text parts joined).
std::string ContentText(const Json& m) {
  if (!m.contains("content")) return "";
  const Json& c = m["content"];
  if (c.is_string()) return c.get<std::string>();
  std::string out;
  if (c.is_array()) {
    for (const Json& part : c) {
      if (part.is_object() && part.contains("text") && part["text"].is_string()) {
        out += (out.empty() ? "" : "\n") + part["text"].get<std::string>();
      }
    }
  }
  return out;
}

std::string KeyText(const GenerateRequest& request) {
  if (!request.chat) {
    const openai::PromptInput& p = request.completion.prompts.front();
    if (p.text.has_value()) return *p.text;
    std::string ids;
    for (TokenId t : p.ids) ids += std::to_string(t) + " ";
    return "ids: " + ids;
  }
  std::string key;
  for (const Json& m : request.chat_request.messages) {
    if (IsSystem(m)) continue;
    key += m.value("role", "") + ": " + ContentText(m);
    if (m.contains("tool_calls")) key += " " + m["tool_calls"].dump();
    if (m.contains("tool_call_id") && m["tool_call_id"].is_string()) {
      key += " [" + m["tool_call_id"].get<std::string>() + "]";
    }
    key += "\n";
  }
  return key;
}

Json ScopeJson(const GenerateRequest& request, std::string_view api_key,
               std::string_view served_model_name) {
  const openai::GenerationParams& p = request.params();
  const SamplingParams& s = p.sampling;
  Json scope{{"endpoint", request.chat ? "chat" : "completions"},
             {"model", served_model_name},
             {"cache_salt", p.cache_salt},
             {"api_key", semcache::HashText(api_key).lo},
             {"temperature", s.temperature},
             {"top_p", s.top_p},
             {"top_k", s.top_k},
             {"min_p", s.min_p},
             {"repetition_penalty", s.repetition_penalty},
             {"presence_penalty", s.presence_penalty},
             {"frequency_penalty", s.frequency_penalty},
             {"seed", s.temperature == 0.0f || !p.seed_given ? Json() : Json(s.seed)},
             {"n", p.n},
             {"best_of", p.best_of},
             {"max_tokens", p.max_tokens ? Json(*p.max_tokens) : Json()},
             {"stop", p.stop},
             {"stop_token_ids", p.stop_token_ids},
             {"logprobs", p.logprobs},
             {"ignore_eos", p.ignore_eos}};
  if (p.guided.has_value()) {
    scope["guided"] = {grammar::GrammarKindName(p.guided->kind), p.guided->text};
  }
  if (request.chat) {
    const openai::ChatRequest& c = request.chat_request;
    Json system = Json::array();
    for (const Json& m : c.messages) {
      if (IsSystem(m)) system.push_back(m);
    }
    scope["system"] = system;
    scope["tools"] = c.tools;
    scope["tool_choice"] = openai::ToolChoiceName(c.tool_choice);
    scope["tool_choice_function"] = c.tool_choice_function;
    scope["parallel_tool_calls"] = c.parallel_tool_calls;
    scope["add_generation_prompt"] = c.add_generation_prompt;
    scope["chat_template_kwargs"] = c.chat_template_kwargs;
  } else {
    scope["echo"] = request.completion.echo;
  }
  return scope;
}

}  // namespace

ResponseCachePlan PlanResponseCache(const GenerateRequest& request,
                                    const ResponseCacheConfig& config,
                                    std::string_view cache_control, std::string_view api_key,
                                    std::string_view served_model_name) {
  ResponseCachePlan plan;
  if (config.cache == nullptr) return plan;
  const openai::GenerationParams& p = request.params();
  if (!request.chat && request.completion.prompts.size() != 1) return plan;
  const ResponseCacheMode best =
      config.embed ? ResponseCacheMode::kSemantic : ResponseCacheMode::kExact;
  if (p.semantic_cache.has_value() && p.semantic_cache->mode.has_value()) {
    const std::string& m = *p.semantic_cache->mode;
    plan.mode = m == "off" ? ResponseCacheMode::kOff
                : m == "exact" ? ResponseCacheMode::kExact
                               : best;
  } else {
    const bool reproducible = p.sampling.temperature == 0.0f || p.seed_given;
    plan.mode = reproducible && p.n == 1 && p.best_of == p.n ? best : ResponseCacheMode::kOff;
  }
  if (plan.mode == ResponseCacheMode::kOff) return plan;
  const std::string directives(cache_control);
  plan.lookup = directives.find("no-cache") == std::string::npos;
  plan.store = directives.find("no-store") == std::string::npos;
  plan.threshold = p.semantic_cache.has_value() && p.semantic_cache->threshold.has_value()
                       ? *p.semantic_cache->threshold
                       : config.threshold;
  plan.scope = semcache::HashText(ScopeJson(request, api_key, served_model_name).dump());
  plan.key_text = KeyText(request);
  return plan;
}

void EmbedCacheKey(const ResponseCacheConfig& config, ResponseCachePlan* plan) {
  if (plan->mode != ResponseCacheMode::kSemantic || !plan->embedding.empty()) return;
  auto embedding = config.embed(plan->key_text);
  if (embedding.ok() && !embedding->empty()) {
    plan->embedding = std::move(embedding).value();
  } else {
    plan->mode = ResponseCacheMode::kExact;
  }
}

Json CachedBody(const semcache::CachedResponse& stored, const semcache::LookupResult& hit,
                const std::string& new_id) {
  Json body = Json::parse(stored.payload);
  body["id"] = new_id;
  body["created"] = openai::UnixNow();
  body["kvserve_cache"] = {{"tier", semcache::HitKindName(hit.kind)},
                           {"similarity", hit.similarity},
                           {"original_id", stored.id}};
  return body;
}

std::vector<Json> CachedStreamChunks(const Json& body, bool chat, bool include_usage) {
  std::vector<Json> chunks;
  auto chunk = [&](Json choice) {
    Json c{{"id", body["id"]},
           {"object", chat ? "chat.completion.chunk" : "text_completion"},
           {"created", body["created"]},
           {"model", body["model"]},
           {"choices", Json::array({std::move(choice)})}};
    if (include_usage) c["usage"] = nullptr;
    chunks.push_back(std::move(c));
  };
  for (const Json& choice : body["choices"]) {
    const Json& index = choice["index"];
    if (!chat) {
      chunk({{"index", index}, {"text", choice["text"]}, {"logprobs", choice["logprobs"]},
             {"finish_reason", nullptr}});
      chunk({{"index", index}, {"text", ""}, {"logprobs", nullptr},
             {"finish_reason", choice["finish_reason"]}});
      continue;
    }
    const Json& message = choice["message"];
    chunk({{"index", index}, {"delta", {{"role", "assistant"}, {"content", ""}}},
           {"logprobs", nullptr}, {"finish_reason", nullptr}});
    if (message.contains("reasoning_content")) {
      chunk({{"index", index}, {"delta", {{"reasoning_content", message["reasoning_content"]}}},
             {"logprobs", nullptr}, {"finish_reason", nullptr}});
    }
    if (message["content"].is_string() && !message["content"].get<std::string>().empty()) {
      chunk({{"index", index}, {"delta", {{"content", message["content"]}}},
             {"logprobs", choice.value("logprobs", Json())}, {"finish_reason", nullptr}});
    }
    if (message.contains("tool_calls")) {
      int i = 0;
      for (const Json& call : message["tool_calls"]) {
        Json delta_call = call;
        delta_call["index"] = i++;
        chunk({{"index", index}, {"delta", {{"tool_calls", Json::array({delta_call})}}},
               {"logprobs", nullptr}, {"finish_reason", nullptr}});
      }
    }
    chunk({{"index", index}, {"delta", Json::object()}, {"logprobs", nullptr},
           {"finish_reason", choice["finish_reason"]}});
  }
  if (include_usage) {
    chunks.push_back(Json{{"id", body["id"]},
                          {"object", chat ? "chat.completion.chunk" : "text_completion"},
                          {"created", body["created"]},
                          {"model", body["model"]},
                          {"choices", Json::array()},
                          {"usage", body["usage"]}});
  }
  return chunks;
}

}  // namespace kvserve

// OpenAiServer's small routes: GET /v1/models, POST /tokenize, POST /detokenize,
// POST /reset_prefix_cache.
#include <string>
#include <utility>
#include <vector>

#include "server/server.h"

namespace kvserve {

using openai::Json;

void OpenAiServer::handle_models(Response& res) {
  Json data = Json::array();
  if (engine_ != nullptr) {
    data.push_back({{"id", options_.served_model_name},
                    {"object", "model"},
                    {"created", created_unix_},
                    {"owned_by", "kvserve"},
                    {"root", options_.served_model_name},
                    {"max_model_len", engine_->scheduler_config().max_model_len}});
  }
  if (options_.embedder != nullptr) {
    data.push_back({{"id", options_.embedding_model_name},
                    {"object", "model"},
                    {"created", created_unix_},
                    {"owned_by", "kvserve"},
                    {"root", options_.embedding_model_name},
                    {"max_model_len", options_.embedder->max_tokens()},
                    {"dimensions", options_.embedder->dim()},
                    {"task", "embed"}});
  }
  res.content_type = "application/json";
  res.body = openai::Dump(Json{{"object", "list"}, {"data", data}});
}

void OpenAiServer::handle_tokenize(const Request& req, Response& res) {
  auto parsed = openai::ParseJsonObject(req.body);
  if (!parsed.ok()) return reply_status(res, parsed.status());
  Json& body = *parsed;
  std::vector<TokenId> ids;
  if (body.contains("messages")) {
    openai::ParamError perr;
    auto chat = openai::ParseChatRequest(body, &perr);
    if (!chat.ok()) {
      reply_error(res, 400, chat.status().message(), perr.param);
      return;
    }
    auto chat_ids = TokenizeChat(*chat, options_.render_chat, *tokenizer_, &perr);
    if (!chat_ids.ok()) {
      reply_status(res, chat_ids.status(), perr);
      return;
    }
    ids = std::move(chat_ids).value();
  } else if (body.contains("prompt") && body["prompt"].is_string()) {
    bool add_special = true;
    if (body.contains("add_special_tokens")) {
      if (!body["add_special_tokens"].is_boolean()) {
        reply_error(res, 400, "'add_special_tokens' must be a boolean", "add_special_tokens");
        return;
      }
      add_special = body["add_special_tokens"].get<bool>();
    }
    ids = tokenizer_->Encode(body["prompt"].get<std::string>(),
                             EncodeOptions{.add_bos = add_special, .parse_special = true});
  } else {
    reply_error(res, 400, "send 'prompt' (a string) or 'messages'", "prompt");
    return;
  }
  Json tokens = Json::array();
  for (TokenId t : ids) tokens.push_back(t);
  res.content_type = "application/json";
  res.body = openai::Dump(Json{{"count", ids.size()},
                               {"max_model_len", max_model_len()},
                               {"tokens", tokens}});
}

void OpenAiServer::handle_reset_prefix_cache(Response& res) {
  if (engine_ == nullptr) {
    reply_error(res, 400, "this server has no generator, hence no prefix cache");
    return;
  }
  if (!engine_->reset_prefix_cache()) {
    reply_error(res, 409,
                "the prefix cache cannot be reset while running requests hold cached blocks; "
                "retry when they have finished");
    return;
  }
  res.content_type = "application/json";
  res.body = openai::Dump(Json{{"status", "ok"}});
}

void OpenAiServer::handle_detokenize(const Request& req, Response& res) {
  auto parsed = openai::ParseJsonObject(req.body);
  if (!parsed.ok()) return reply_status(res, parsed.status());
  Json& body = *parsed;
  if (!body.contains("tokens") || !body["tokens"].is_array()) {
    reply_error(res, 400, "send {\"tokens\": [ids...]}", "tokens");
    return;
  }
  std::vector<TokenId> ids;
  for (const Json& t : body["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
        t.get<int64_t>() >= tokenizer_->vocab_size()) {
      reply_error(res, 400,
                  "token ids must be integers in [0, " + std::to_string(tokenizer_->vocab_size()) +
                      ")",
                  "tokens");
      return;
    }
    ids.push_back(static_cast<TokenId>(t.get<int64_t>()));
  }
  res.content_type = "application/json";
  res.body = openai::Dump(Json{{"prompt", tokenizer_->Decode(ids)}});
}

}  // namespace kvserve

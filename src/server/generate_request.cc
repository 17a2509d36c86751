#include "server/generate_request.h"

#include <algorithm>
#include <random>
#include <utility>

#include "base/check.h"
#include "server/structured_output.h"

namespace kvserve {

using openai::Json;

namespace {

uint64_t RandomSeed() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

// InvalidArgument naming `param` (and an OpenAI error `code`) in *error.
Status Fail(openai::ParamError* error, const std::string& message, const std::string& param = "",
            const std::string& code = "") {
  if (error != nullptr) *error = {param, message, code};
  return InvalidArgumentError(message);
}

// A text of `num_bytes` has at least ceil(num_bytes / max_bytes_per_token) tokens: past
// max_prompt_tokens it cannot fit, and is refused without tokenizing it (a 28 MB prompt would
// take seconds of CPU only to be refused).
Status CheckPromptBytes(size_t num_bytes, const Tokenizer& tok, int64_t max_prompt_tokens,
                        const char* param, openai::ParamError* error) {
  const int64_t per_token = tok.max_bytes_per_token();
  if (max_prompt_tokens == INT64_MAX || per_token == INT64_MAX) return OkStatus();
  const int64_t at_least = (static_cast<int64_t>(num_bytes) + per_token - 1) / per_token;
  if (at_least <= max_prompt_tokens) return OkStatus();
  return Fail(error,
              "this model's maximum context length is " + std::to_string(max_prompt_tokens + 1) +
                  " tokens; the prompt has " + std::to_string(num_bytes) +
                  " bytes, so at least " + std::to_string(at_least) +
                  " tokens (this vocabulary's tokens hold at most " + std::to_string(per_token) +
                  " bytes). Shorten the prompt",
              param, "context_length_exceeded");
}

// The prompts of a request as token ids: the chat template's text, or each completions prompt
// (text with a BOS, or ids used as they are but checked against the vocabulary).
// max_prompt_tokens: CheckPromptBytes's bound (INT64_MAX: none).
StatusOr<std::vector<std::vector<TokenId>>> TokenizePrompts(const GenerateRequest& request,
                                                            const EngineInputOptions& options,
                                                            int64_t max_prompt_tokens,
                                                            openai::ParamError* error,
                                                            std::string* chat_prompt_text) {
  const Tokenizer& tok = *options.tokenizer;
  std::vector<std::vector<TokenId>> prompts;
  if (request.chat) {
    static const ChatRenderer kNone;
    auto ids = TokenizeChat(request.chat_request,
                            options.render_chat != nullptr ? *options.render_chat : kNone, tok,
                            error, max_prompt_tokens, chat_prompt_text);
    if (!ids.ok()) return ids.status();
    prompts.push_back(std::move(ids).value());
    return prompts;
  }
  const int64_t vocab = tok.vocab_size();
  for (const openai::PromptInput& p : request.completion.prompts) {
    if (p.text.has_value()) {
      KV_RETURN_IF_ERROR(CheckPromptBytes(p.text->size(), tok, max_prompt_tokens, "prompt", error));
      prompts.push_back(tok.Encode(*p.text, EncodeOptions{.add_bos = true, .parse_special = true}));
      continue;
    }
    for (TokenId t : p.ids) {
      if (t >= vocab) {
        return Fail(error,
                    "prompt token id " + std::to_string(t) + " is outside the vocabulary (" +
                        std::to_string(vocab) + " tokens)",
                    "prompt");
      }
    }
    prompts.push_back(p.ids);
  }
  return prompts;
}

// The checks that need the model: its name, stop token ids in the vocabulary, every prompt
// non-empty and, with max_tokens, within the context.
// check_context: the prompt and max_tokens must fit max_model_len (not for StreamingLLM).
Status CheckAgainstModel(const GenerateRequest& request,
                         const std::vector<std::vector<TokenId>>& prompts,
                         const EngineInputOptions& options, bool check_context,
                         openai::ParamError* error) {
  const openai::GenerationParams& params = request.params();
  if (!params.model.empty() && params.model != options.served_model_name) {
    return Fail(error,
                "the model '" + params.model + "' does not exist; this server serves '" +
                    options.served_model_name + "'",
                "model", "model_not_found");
  }
  for (TokenId t : params.stop_token_ids) {
    if (t >= options.tokenizer->vocab_size()) {
      return Fail(error, "stop_token_ids: " + std::to_string(t) + " is outside the vocabulary",
                  "stop_token_ids");
    }
  }
  const char* prompt_param = request.chat ? "messages" : "prompt";
  const int64_t max_model_len = options.max_model_len;
  for (const std::vector<TokenId>& p : prompts) {
    const int64_t len = static_cast<int64_t>(p.size());
    if (len == 0) return Fail(error, "the prompt is empty", prompt_param);
    if (check_context &&
        (len >= max_model_len || (params.max_tokens && len + *params.max_tokens > max_model_len))) {
      return Fail(error,
                  "this model's maximum context length is " + std::to_string(max_model_len) +
                      " tokens; the request has " + std::to_string(len) + " prompt tokens" +
                      (params.max_tokens ? " and asks for " + std::to_string(*params.max_tokens) +
                                               " completion tokens"
                                         : std::string()) +
                      ". Shorten the prompt or lower max_tokens",
                  prompt_param, "context_length_exceeded");
    }
  }
  return OkStatus();
}

}  // namespace

StatusOr<GenerateRequest> ParseGenerateRequest(std::string_view body, bool chat,
                                               openai::ParamError* error) {
  auto parsed = openai::ParseJsonObject(body);
  if (!parsed.ok()) return Fail(error, parsed.status().message());
  const Json& json = *parsed;
  GenerateRequest out;
  out.chat = chat;
  if (chat) {
    auto parsed = openai::ParseChatRequest(json, error);
    if (!parsed.ok()) return parsed.status();
    out.chat_request = std::move(parsed).value();
  } else {
    auto parsed = openai::ParseCompletionRequest(json, error);
    if (!parsed.ok()) return parsed.status();
    out.completion = std::move(parsed).value();
  }
  return out;
}

StatusOr<std::vector<TokenId>> TokenizeChat(const openai::ChatRequest& request,
                                            const ChatRenderer& render_chat,
                                            const Tokenizer& tokenizer, openai::ParamError* error,
                                            int64_t max_prompt_tokens, std::string* prompt_text) {
  if (!render_chat) return Fail(error, "this server has no chat template");
  auto text = render_chat(request);
  if (!text.ok()) return Fail(error, "chat template: " + text.status().message(), "messages");
  KV_RETURN_IF_ERROR(
      CheckPromptBytes(text->size(), tokenizer, max_prompt_tokens, "messages", error));
  std::vector<TokenId> ids =
      tokenizer.Encode(*text, EncodeOptions{.add_bos = false, .parse_special = true});
  if (prompt_text != nullptr) *prompt_text = std::move(text).value();
  return ids;
}

StatusOr<KvEvictionPolicy> ApplyKvPolicy(const KvEvictionPolicy& server_default,
                                         const openai::GenerationParams& params,
                                         openai::ParamError* error) {
  KvEvictionPolicy policy = server_default;
  if (!params.kv_policy.has_value()) return policy;
  const openai::GenerationParams::KvPolicyFields& f = *params.kv_policy;
  if (f.method.has_value()) {
    StatusOr<KvEvictionMethod> method = ParseKvEvictionMethod(*f.method);
    if (!method.ok()) return Fail(error, method.status().message(), "kv_policy.method");
    policy.method = *method;
  }
  if (f.budget_tokens) policy.budget_tokens = *f.budget_tokens;
  if (f.sink_tokens) policy.sink_tokens = *f.sink_tokens;
  if (f.window_tokens) policy.window_tokens = *f.window_tokens;
  if (f.observation_window) policy.observation_window = *f.observation_window;
  if (Status s = policy.Validate(); !s.ok()) {
    // Validate's message starts with the field it refuses.
    const std::string& m = s.message();
    const std::string field = m.substr(0, m.find(' '));
    return Fail(error, "kv_policy." + m, "kv_policy." + field);
  }
  return policy;
}

StatusOr<EngineInputs> BuildEngineInputs(const GenerateRequest& request,
                                         const EngineInputOptions& options,
                                         openai::ParamError* error) {
  KV_CHECK(options.tokenizer != nullptr);
  const openai::GenerationParams& params = request.params();
  StatusOr<KvEvictionPolicy> policy = ApplyKvPolicy(options.kv_policy, params, error);
  if (!policy.ok()) return policy.status();
  // StreamingLLM positions tokens within its window: any length runs (the engine checks that
  // the window fits the context).
  const bool streaming = policy->method == KvEvictionMethod::kStreaming;
  EngineInputs out;
  auto prompts = TokenizePrompts(request, options,
                                 streaming ? INT64_MAX : options.max_model_len - 1, error,
                                 &out.chat_prompt_text);
  if (!prompts.ok()) return prompts.status();
  KV_RETURN_IF_ERROR(CheckAgainstModel(request, *prompts, options, !streaming, error));
  auto grammar = RequestGrammar(params, request.chat ? &request.chat_request : nullptr,
                                options.grammar_cache, error);
  if (!grammar.ok()) return grammar.status();
  out.grammar = *grammar;
  const bool echo = !request.chat && request.completion.echo;
  for (size_t p = 0; p < prompts->size(); ++p) {
    const std::vector<TokenId>& ids = (*prompts)[p];
    const int64_t len = static_cast<int64_t>(ids.size());
    out.prompt_lengths.push_back(len);
    if (echo) {
      const openai::PromptInput& in = request.completion.prompts[p];
      out.echo_texts.push_back(in.text.has_value() ? *in.text : options.tokenizer->Decode(ids));
    }
    for (int64_t j = 0; j < params.best_of; ++j) {
      EngineInputs::Choice c;
      c.prompt_index = static_cast<int64_t>(p);
      RequestInput& in = c.input;
      in.prompt_ids = ids;
      in.sampling = params.sampling;
      in.sampling.seed = params.seed_given ? params.sampling.seed + static_cast<uint64_t>(j)
                                           : RandomSeed();
      // Default: completions 16 tokens (OpenAI); chat: the rest of the context (vLLM).
      // StreamingLLM chat: max_model_len more tokens (it has no end of context).
      in.max_tokens = params.max_tokens ? *params.max_tokens
                      : !request.chat   ? 16
                      : streaming       ? options.max_model_len
                                        : options.max_model_len - len;
      in.stop = params.stop;
      in.stop_token_ids = params.stop_token_ids;
      in.ignore_eos = params.ignore_eos;
      in.priority = params.priority;
      in.cache_salt = params.cache_salt;
      in.logprobs = params.logprobs;
      // best_of ranks the candidates by their tokens' logprobs.
      if (params.best_of > params.n) in.logprobs = std::max<int32_t>(0, params.logprobs);
      // echo: the prompt's logprobs (asked for, or a scoring request with max_tokens 0).
      if (echo && (params.logprobs >= 0 || in.max_tokens == 0)) in.prompt_logits_start = 0;
      in.kv_policy = *policy;
      in.grammar = out.grammar;
      out.choices.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace kvserve

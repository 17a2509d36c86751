// OpenAiServer's generation routes (/v1/completions, /v1/chat/completions), one named step
// after the other:
//   ParseGenerateRequest -> BuildEngineInputs   (generate_request.h: pure, 400 naming the param)
//   submit_generation                           (admission bound (503), one engine request per
//                                                choice, each tracked for Shutdown())
//   respond_gathered | respond_streaming        (one JSON body | SSE chunks; usage, logprobs,
//                                                finish reasons; a failed write -> abort)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "server/server.h"

namespace kvserve {

using openai::Json;

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(500);

std::string RandomId(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%s%016llx", prefix, static_cast<unsigned long long>(rng()));
  return buf;
}

double Seconds(EngineClock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

// One HTTP generation request: its engine requests (one per prompt x n), their outputs so far,
// and the per-request metrics. Lives as long as the HTTP response that streams it (shared by
// the handler and the content provider); destroying it aborts unfinished engine requests and
// releases the admission slots. Used by one HTTP thread at a time.
struct OpenAiServer::Generation {
  struct Choice {
    int64_t index = 0;
    int64_t prompt_index = 0;
    int64_t num_prompt_tokens = 0;
    std::unique_ptr<RequestStream> stream;
    std::string text;  // all text so far
    int64_t num_tokens = 0;
    int64_t num_cached_tokens = 0;
    int64_t num_cached_tokens_by_tier[kNumKvTiers] = {};
    int64_t num_kv_tokens_evicted = 0;
    bool divergence_observed = false;  // prompt_divergence_tokens observed at admission
    KvEvictionMethod kv_eviction = KvEvictionMethod::kNone;
    FinishReason finish = FinishReason::kNone;
    std::string error;
    bool done = false;
    EngineClock::time_point last_token_time{};
    double sum_logprob = 0.0;  // of the sampled tokens (best_of ranks by the mean)
    int64_t echo_offset = 0;   // echo with logprobs: text offset of the next prompt token
    openai::CompletionLogprobs completion_logprobs;
    Json chat_logprobs = Json::array();
    // Streamed chat choices with tools or reasoning: the parser the text goes through.
    std::unique_ptr<toolcall::ChatOutputStream> output;
  };

  Generation(OpenAiServer* s, int64_t num_slots) : server(s), slots(num_slots) {}
  ~Generation() {
    for (Choice& c : choices) {
      // Not done: the client went away (or the request failed): aborted with the stream.
      if (!c.done) server->metrics_.count_finished("abort");
      if (c.stream != nullptr) server->untrack(c.stream->id());
      c.stream.reset();  // aborts unfinished requests
    }
    server->release(slots);
  }

  OpenAiServer* server;
  int64_t slots;
  bool chat = false;
  std::string id;
  int64_t created = 0;
  std::string model;
  openai::GenerationParams params;
  std::string namespace_label;  // PromptNamespaceLabel(params.cache_salt)
  // Completions with echo: each prompt's text (the response text starts with it) and first
  // token (listed without a logprob).
  bool echo = false;
  std::vector<std::string> echo_texts;
  std::vector<TokenId> echo_first_tokens;
  ChatOutputPlan plan;  // chat: how the text becomes the message
  toolcall::ToolCallIdGenerator tool_call_ids = toolcall::ToolCallIdGenerator::FromRandomDevice();
  std::vector<Choice> choices;
  std::vector<int64_t> prompt_lengths;

  // Applies one engine event to its choice (text, logprobs, metrics). Returns the new text.
  std::string apply(Choice& c, const StreamEvent& ev, Json* chat_logprobs_delta,
                    openai::CompletionLogprobs* completion_logprobs_delta) {
    ServerMetrics& m = server->metrics_;
    const Tokenizer* tok = server->tokenizer_;
    if (!ev.token_ids.empty()) {
      if (c.num_tokens == 0) {
        m.time_to_first_token_seconds.observe(Seconds(ev.time - c.stream->submit_time()));
      } else {
        m.inter_token_latency_seconds.observe(Seconds(ev.time - c.last_token_time));
      }
      c.last_token_time = ev.time;
    }
    auto text_of = [&](const SampledLogprobs& lp, std::vector<openai::TokenText>* top) {
      for (const TokenLogprob& t : lp.top) {
        top->push_back({t.token, tok->TokenToPiece(t.token, true), t.logprob});
      }
      return openai::TokenText{lp.sampled.token, tok->TokenToPiece(lp.sampled.token, true),
                               lp.sampled.logprob};
    };
    if (echo && params.logprobs >= 0 && !ev.prompt_logprobs.empty()) {
      if (ev.prompt_logprobs_first == 1) {
        const std::string first =
            tok->TokenToPiece(echo_first_tokens[static_cast<size_t>(c.prompt_index)], true);
        c.completion_logprobs.add_unscored(first, 0);
        if (completion_logprobs_delta != nullptr) completion_logprobs_delta->add_unscored(first, 0);
        c.echo_offset = static_cast<int64_t>(first.size());
      }
      for (const SampledLogprobs& lp : ev.prompt_logprobs) {
        std::vector<openai::TokenText> top;
        const openai::TokenText sampled = text_of(lp, &top);
        c.completion_logprobs.add(sampled, top, c.echo_offset);
        if (completion_logprobs_delta != nullptr) {
          completion_logprobs_delta->add(sampled, top, c.echo_offset);
        }
        c.echo_offset += static_cast<int64_t>(sampled.text.size());
      }
    }
    for (size_t i = 0; i < ev.logprobs.size(); ++i) {
      const SampledLogprobs& lp = ev.logprobs[i];
      c.sum_logprob += lp.sampled.logprob;
      if (params.logprobs < 0) continue;  // asked for by best_of only
      std::vector<openai::TokenText> top;
      const openai::TokenText sampled = text_of(lp, &top);
      if (chat) {
        Json entry = openai::ChatLogprobEntry(sampled, top);
        c.chat_logprobs.push_back(entry);
        if (chat_logprobs_delta != nullptr) chat_logprobs_delta->push_back(entry);
      } else {
        const int64_t offset =
            static_cast<int64_t>(echo_text(c).size()) + static_cast<int64_t>(c.text.size());
        c.completion_logprobs.add(sampled, top, offset);
        if (completion_logprobs_delta != nullptr) {
          completion_logprobs_delta->add(sampled, top, offset);
        }
      }
    }
    c.num_tokens += static_cast<int64_t>(ev.token_ids.size());
    if (!c.divergence_observed && ev.first_scheduled_time != EngineClock::time_point{}) {
      // Its first admission's cached prefix: where the prompt left what the cache held.
      c.divergence_observed = true;
      m.prompt_divergence_tokens.observe(namespace_label,
                                         static_cast<double>(ev.num_cached_prompt_tokens));
    }
    if (ev.num_cached_prompt_tokens >= c.num_cached_tokens) {
      c.num_cached_tokens = ev.num_cached_prompt_tokens;
      std::copy_n(ev.num_cached_prompt_tokens_by_tier, kNumKvTiers, c.num_cached_tokens_by_tier);
    }
    c.num_kv_tokens_evicted = std::max(c.num_kv_tokens_evicted, ev.num_kv_tokens_evicted);
    c.text += ev.text;
    if (ev.finished()) {
      c.done = true;
      c.finish = ev.finish_reason;
      c.error = ev.error;
      const EngineClock::time_point submitted = c.stream->submit_time();
      m.e2e_request_latency_seconds.observe(Seconds(ev.time - submitted));
      if (ev.first_scheduled_time != EngineClock::time_point{}) {
        m.request_queue_time_seconds.observe(Seconds(ev.first_scheduled_time - submitted));
      }
      m.request_prompt_tokens.observe(static_cast<double>(c.num_prompt_tokens));
      m.request_generation_tokens.observe(static_cast<double>(c.num_tokens));
      m.count_finished(FinishReasonName(ev.finish_reason));
      if (c.kv_eviction != KvEvictionMethod::kNone) {
        // Tokens whose KV was computed: the prompt and every output token but the last.
        const int64_t total = c.num_prompt_tokens + std::max<int64_t>(0, c.num_tokens - 1);
        m.record_kv_eviction(KvEvictionMethodName(c.kv_eviction), c.num_kv_tokens_evicted,
                             total);
      }
      if (ev.first_scheduled_time != EngineClock::time_point{}) {
        m.recent_hit_rate.record(c.num_prompt_tokens, c.num_cached_tokens);
      }
    }
    return ev.text;
  }

  const std::string& echo_text(const Choice& c) const {
    static const std::string kNone;
    return echo ? echo_texts[static_cast<size_t>(c.prompt_index)] : kNone;
  }

  // best_of > n: keeps the n choices of each prompt with the highest mean token logprob (ties:
  // the earlier choice), numbered in order. The others' tokens stay in the usage.
  std::vector<const Choice*> returned_choices() const {
    std::vector<const Choice*> out;
    for (const Choice& c : choices) out.push_back(&c);
    if (params.best_of <= params.n) return out;
    auto mean = [](const Choice* c) {
      return c->num_tokens > 0 ? c->sum_logprob / static_cast<double>(c->num_tokens) : 0.0;
    };
    std::stable_sort(out.begin(), out.end(), [&](const Choice* a, const Choice* b) {
      if (a->prompt_index != b->prompt_index) return a->prompt_index < b->prompt_index;
      return mean(a) > mean(b);
    });
    std::vector<const Choice*> kept;
    for (size_t i = 0; i < out.size(); ++i) {
      if (static_cast<int64_t>(i) % params.best_of < params.n) kept.push_back(out[i]);
    }
    return kept;
  }

  // Waits for the next event of any unfinished choice. Returns false when every choice is
  // done. *timed_out: nothing arrived within the poll interval.
  bool next(size_t* which, StreamEvent* ev, bool* timed_out) {
    *timed_out = false;
    const auto per_choice = choices.size() == 1 ? kPollInterval : std::chrono::milliseconds(2);
    const auto deadline = EngineClock::now() + kPollInterval;
    while (true) {
      bool any = false;
      for (size_t i = 0; i < choices.size(); ++i) {
        Choice& c = choices[i];
        if (c.done) continue;
        any = true;
        if (c.stream->NextFor(ev, per_choice) == RequestStream::WaitResult::kEvent) {
          *which = i;
          return true;
        }
      }
      if (!any) return false;
      if (EngineClock::now() >= deadline) {
        *timed_out = true;
        return true;
      }
    }
  }

  Json usage() const {
    int64_t prompt = 0, completion = 0, cached = 0, evicted = 0;
    int64_t by_tier[kNumKvTiers] = {};
    for (int64_t len : prompt_lengths) prompt += len;
    std::vector<bool> counted(prompt_lengths.size(), false);
    for (const Choice& c : choices) {
      completion += c.num_tokens;
      evicted += c.num_kv_tokens_evicted;
      if (!counted[static_cast<size_t>(c.prompt_index)]) {
        counted[static_cast<size_t>(c.prompt_index)] = true;
        cached += c.num_cached_tokens;
        for (int t = 0; t < kNumKvTiers; ++t) by_tier[t] += c.num_cached_tokens_by_tier[t];
      }
    }
    return openai::Usage(prompt, completion, cached, evicted,
                         server->options_.kv_tiers != nullptr ? by_tier : nullptr);
  }

  Json chunk_base() const {
    return Json{{"id", id},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", model}};
  }

  // Gathered: runs every choice to its end, then the one response body (InternalError when a
  // choice failed; Cancelled when the client went away first: the caller drops the
  // generation, which aborts its engine requests).
  StatusOr<Json> gather(const http::ResponseWriter& writer) {
    size_t which = 0;
    StreamEvent ev;
    bool timed_out = false;
    while (next(&which, &ev, &timed_out)) {
      if (writer.client_gone()) return CancelledError("the client went away");
      if (!timed_out) apply(choices[which], ev, nullptr, nullptr);
    }
    return body();
  }

  // Every choice ended normally (stop, length; not an error, an abort or a client that left):
  // the response may be stored in the response cache.
  bool complete() const {
    for (const Choice& c : choices) {
      if (!c.done || (c.finish != FinishReason::kStop && c.finish != FinishReason::kLength)) {
        return false;
      }
    }
    return true;
  }

  // The non-streamed response body of the choices so far (InternalError when a choice failed).
  StatusOr<Json> body() {
    const bool want_logprobs = params.logprobs >= 0;
    for (const Choice& c : choices) {
      if (c.finish == FinishReason::kError) return InternalError("generation failed: " + c.error);
    }
    Json out_choices = Json::array();
    int64_t index = 0;
    for (const Choice* kept : returned_choices()) {
      const Choice& c = *kept;
      Json choice = {{"index", index++}, {"finish_reason", FinishReasonName(c.finish)}};
      if (chat && !plan.plain()) {
        toolcall::ChatOutput message = toolcall::ParseChatOutput(c.text, plan.options, tool_call_ids);
        if (plan.single_tool_call && message.tool_calls.size() > 1) message.tool_calls.resize(1);
        choice["message"] = toolcall::OpenAiMessageJson(message);
        if (!message.tool_calls.empty() && c.finish == FinishReason::kStop) {
          choice["finish_reason"] = "tool_calls";
        }
        choice["logprobs"] = want_logprobs ? Json{{"content", c.chat_logprobs}} : Json();
      } else if (chat) {
        choice["message"] = {{"role", "assistant"}, {"content", c.text}};
        choice["logprobs"] = want_logprobs ? Json{{"content", c.chat_logprobs}} : Json();
      } else {
        choice["text"] = echo_text(c) + c.text;
        choice["logprobs"] = want_logprobs ? c.completion_logprobs.json() : Json();
      }
      out_choices.push_back(std::move(choice));
    }
    return Json{{"id", id},
                {"object", chat ? "chat.completion" : "text_completion"},
                {"created", created},
                {"model", model},
                {"choices", out_choices},
                {"usage", usage()}};
  }

  // Streamed: the chunk that opens choice c of a chat stream (the role, as OpenAI sends it).
  Json role_chunk(const Choice& c) const {
    Json chunk = chunk_base();
    chunk["choices"] = Json::array({{{"index", c.index},
                                     {"delta", {{"role", "assistant"}, {"content", ""}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}}});
    if (params.include_usage) chunk["usage"] = nullptr;
    return chunk;
  }

  Json chunk_of(Json choice) const {
    Json chunk = chunk_base();
    chunk["choices"] = Json::array({std::move(choice)});
    if (params.include_usage) chunk["usage"] = nullptr;
    return chunk;
  }

  // Streamed: applies an engine event to choice c; returns its chunks: none when the event
  // carries nothing to say (no text, no logprobs asked for, not the end); with a tool-call or
  // reasoning parser one per delta it produced (the last carries the logprobs and the finish).
  std::vector<Json> event_chunks(Choice& c, const StreamEvent& ev) {
    const bool want_logprobs = params.logprobs >= 0;
    Json chat_lp = Json::array();
    openai::CompletionLogprobs completion_lp;
    const std::string text = apply(c, ev, &chat_lp, &completion_lp);
    const bool has_tokens = !ev.token_ids.empty();
    const bool send_logprobs = want_logprobs && has_tokens;
    std::vector<Json> deltas;  // chat delta objects
    if (c.output != nullptr) {
      std::vector<toolcall::OutputDelta> parsed;
      if (!text.empty()) c.output->Feed(text, &parsed);
      if (ev.finished()) c.output->Finish(&parsed);
      for (const toolcall::OutputDelta& d : parsed) {
        if (plan.single_tool_call && d.tool_call_index >= 1) continue;  // parallel_tool_calls false
        deltas.push_back(toolcall::OpenAiDeltaJson(d));
      }
    } else if (!text.empty()) {
      deltas.push_back(Json{{"content", text}});
    }
    if (!chat) {
      if (text.empty() && !ev.finished() && !send_logprobs) return {};
      Json choice = {{"index", c.index}, {"text", text}};
      choice["logprobs"] = send_logprobs ? completion_lp.json() : Json();
      choice["finish_reason"] = ev.finished() ? Json(FinishReasonName(c.finish)) : Json();
      return {chunk_of(std::move(choice))};
    }
    if (deltas.empty() && !ev.finished() && !send_logprobs) return {};
    if (deltas.empty()) deltas.push_back(Json::object());
    std::vector<Json> chunks;
    for (size_t i = 0; i < deltas.size(); ++i) {
      const bool last = i + 1 == deltas.size();
      Json choice = {{"index", c.index}, {"delta", std::move(deltas[i])}};
      choice["logprobs"] = last && send_logprobs ? Json{{"content", chat_lp}} : Json();
      Json finish;
      if (last && ev.finished()) {
        const bool called = c.output != nullptr && c.output->num_tool_calls() > 0;
        finish = called && c.finish == FinishReason::kStop ? "tool_calls"
                                                           : FinishReasonName(c.finish);
      }
      choice["finish_reason"] = finish;
      chunks.push_back(chunk_of(std::move(choice)));
    }
    return chunks;
  }

  // Streamed: writes the whole SSE response (role chunks, event chunks or `: ping` while
  // queued, the usage chunk, [DONE]). Returns false when a write failed (the client went
  // away): the caller drops the generation, which aborts its engine requests.
  bool write_sse(http::ResponseWriter& sink) {
    auto send = [&](const Json& j) { return sink.Write("data: " + openai::Dump(j) + "\n\n"); };
    for (const Choice& c : choices) {
      if (chat && !send(role_chunk(c))) return false;
      // echo: the prompt's text opens the choice (its logprobs follow as they are computed).
      if (!chat && echo &&
          !send(chunk_of(Json{{"index", c.index}, {"text", echo_text(c)}, {"logprobs", nullptr},
                              {"finish_reason", nullptr}}))) {
        return false;
      }
    }
    size_t which = 0;
    StreamEvent ev;
    bool timed_out = false;
    while (next(&which, &ev, &timed_out)) {
      if (timed_out) {
        // Nothing to say yet (queued): an SSE comment keeps the connection alive and
        // notices a client that went away (its requests are aborted on return).
        if (!sink.Write(": ping\n\n")) return false;
        continue;
      }
      Choice& c = choices[which];
      const std::vector<Json> chunks = event_chunks(c, ev);
      if (c.finish == FinishReason::kError) {
        send(Json{{"error", openai::ErrorBody(500, "generation failed: " + c.error)["error"]}});
        sink.EndStream();
        return true;
      }
      for (const Json& chunk : chunks) {
        if (!send(chunk)) return false;
      }
    }
    if (params.include_usage) {
      Json chunk = chunk_base();
      chunk["choices"] = Json::array();
      chunk["usage"] = usage();
      if (!send(chunk)) return false;
    }
    if (!sink.Write("data: [DONE]\n\n")) return false;
    return sink.EndStream();
  }
};

void OpenAiServer::handle_generate(const Request& req, Response& res, Writer& writer,
                                   bool chat) {
  if (!authorized(req, res)) return;
  if (draining_.load()) {
    reply_error(res, 503, "the server is shutting down");
    return;
  }
  if (engine_ == nullptr) {
    reply_error(res, 400,
                "the model '" + options_.embedding_model_name +
                    "' is an embedding model: this server answers /v1/embeddings only",
                "model", "model_not_supported");
    return;
  }
  openai::ParamError perr;
  auto request = ParseGenerateRequest(req.body, chat, &perr);
  if (!request.ok()) return reply_status(res, request.status(), perr);
  const EngineInputOptions input_options{.tokenizer = tokenizer_,
                                         .render_chat = &options_.render_chat,
                                         .served_model_name = options_.served_model_name,
                                         .max_model_len = engine_->scheduler_config().max_model_len,
                                         .kv_policy = options_.kv_policy,
                                         .grammar_cache = &grammar_cache_};
  auto inputs = BuildEngineInputs(*request, input_options, &perr);
  if (!inputs.ok()) return reply_status(res, inputs.status(), perr);
  ChatOutputPlan plan;
  if (chat) {
    auto planned = PlanChatOutput(request->chat_request, options_.chat_output,
                                  inputs->grammar != nullptr, inputs->chat_prompt_text, &perr);
    if (!planned.ok()) return reply_status(res, planned.status(), perr);
    plan = std::move(planned).value();
  }
  // Tier 1: the response cache, once the request is known to be valid.
  ResponseCachePlan cache = PlanResponseCache(
      *request, options_.response_cache, req.header("Cache-Control"),
      options_.api_key.empty() ? "" : req.header("Authorization"), options_.served_model_name);
  http::Headers cache_headers;
  if (cache.mode != ResponseCacheMode::kOff) cache_headers.push_back({"x-kvserve-cache", "miss"});
  if (cache.lookup) {
    // Exact repeats first: they never wait for the embedding model.
    semcache::SemanticCache& rc = *options_.response_cache.cache;
    semcache::LookupResult hit = rc.Lookup(cache.scope, cache.key_text, {}, cache.threshold);
    if (hit.kind == semcache::HitKind::kMiss && cache.mode == ResponseCacheMode::kSemantic) {
      EmbedCacheKey(options_.response_cache, &cache);
      if (!cache.embedding.empty()) {
        hit = rc.Lookup(cache.scope, cache.key_text, cache.embedding, cache.threshold);
      }
    }
    metrics_.record_cache_lookup(
        semcache::HitKindName(hit.kind), !hit.veto_reason.empty(),
        cache.mode == ResponseCacheMode::kSemantic ? hit.similarity : -1.0,
        hit.response != nullptr ? hit.response->generation_seconds : 0.0);
    if (hit.kind != semcache::HitKind::kMiss) {
      return respond_from_cache(*request, hit, res, writer);
    }
  }
  const auto start = EngineClock::now();
  auto gen = submit_generation(*request, std::move(inputs).value(), std::move(plan));
  if (!gen.ok()) return reply_status(res, gen.status());
  if (request->params().stream) {
    respond_streaming(**gen, writer, cache_headers);
  } else {
    respond_gathered(**gen, res, writer);
    res.headers.insert(res.headers.end(), cache_headers.begin(), cache_headers.end());
  }
  if (cache.store && (*gen)->complete()) {
    auto body = (*gen)->body();
    if (!body.ok()) return;
    semcache::CachedResponse stored;
    stored.id = (*gen)->id;
    stored.payload = openai::Dump(*body);
    stored.num_output_tokens = (*body)["usage"]["completion_tokens"].get<int64_t>();
    stored.generation_seconds = Seconds(EngineClock::now() - start);
    EmbedCacheKey(options_.response_cache, &cache);  // not yet when the lookup was skipped
    if (options_.response_cache.cache
            ->Insert(cache.scope, cache.key_text, cache.embedding, std::move(stored))
            .ok()) {
      metrics_.count_cache_store();
    }
  }
}

void OpenAiServer::respond_from_cache(const GenerateRequest& request,
                                      const semcache::LookupResult& hit, Response& res,
                                      Writer& writer) {
  const Json body = CachedBody(*hit.response, hit, RandomId(request.chat ? "chatcmpl-" : "cmpl-"));
  char similarity[32];
  std::snprintf(similarity, sizeof(similarity), "%.4f", hit.similarity);
  const http::Headers headers = {{"x-kvserve-cache", semcache::HitKindName(hit.kind)},
                                 {"x-kvserve-cache-similarity", similarity},
                                 {"x-kvserve-cache-original-id", hit.response->id}};
  if (!request.params().stream) {
    res.content_type = "application/json";
    res.headers = headers;
    res.body = openai::Dump(body);
    return;
  }
  http::Headers stream_headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
  stream_headers.insert(stream_headers.end(), headers.begin(), headers.end());
  if (!writer.StartStream(200, "text/event-stream", stream_headers)) return;
  for (const Json& chunk :
       CachedStreamChunks(body, request.chat, request.params().include_usage)) {
    if (!writer.Write("data: " + openai::Dump(chunk) + "\n\n")) return;
  }
  if (writer.Write("data: [DONE]\n\n")) writer.EndStream();
}

StatusOr<std::shared_ptr<OpenAiServer::Generation>> OpenAiServer::submit_generation(
    const GenerateRequest& request, EngineInputs inputs, ChatOutputPlan plan) {
  const int64_t num_choices = static_cast<int64_t>(inputs.choices.size());
  if (num_choices > max_in_flight_) {  // can never fit, however long the client waits
    return InvalidArgumentError(
        "the request asks for " + std::to_string(num_choices) +
        " sequences (prompts x n), more than this server ever runs or queues at once (" +
        std::to_string(max_in_flight_) + ": --max-num-seqs + --max-queue-len)");
  }
  std::string why;
  if (!try_admit(num_choices, &why)) return UnavailableError(why);
  auto gen = std::make_shared<Generation>(this, num_choices);
  gen->chat = request.chat;
  gen->id = RandomId(request.chat ? "chatcmpl-" : "cmpl-");
  gen->created = openai::UnixNow();
  gen->model = options_.served_model_name;
  gen->params = request.params();
  gen->namespace_label = PromptNamespaceLabel(gen->params.cache_salt);
  gen->echo = !request.chat && request.completion.echo;
  gen->echo_texts = inputs.echo_texts;
  for (const EngineInputs::Choice& in : inputs.choices) {
    if (gen->echo && in.prompt_index == static_cast<int64_t>(gen->echo_first_tokens.size())) {
      gen->echo_first_tokens.push_back(in.input.prompt_ids.front());
    }
  }
  gen->plan = std::move(plan);
  gen->prompt_lengths = inputs.prompt_lengths;
  for (EngineInputs::Choice& in : inputs.choices) {
    auto stream = engine_->submit(std::move(in.input));
    // gen's destructor aborts the choices submitted so far.
    if (!stream.ok()) return InvalidArgumentError(stream.status().message());
    Generation::Choice c;
    c.index = static_cast<int64_t>(gen->choices.size());
    c.prompt_index = in.prompt_index;
    c.num_prompt_tokens = inputs.prompt_lengths[static_cast<size_t>(in.prompt_index)];
    c.kv_eviction = in.input.kv_policy.method;
    c.stream = std::move(stream).value();
    if (request.chat && !gen->plan.plain() && request.params().stream) {
      c.output = std::make_unique<toolcall::ChatOutputStream>(gen->plan.options,
                                                              &gen->tool_call_ids);
    }
    track(c.stream->id());
    gen->choices.push_back(std::move(c));
  }
  return gen;
}

void OpenAiServer::respond_gathered(Generation& gen, Response& res, const Writer& writer) {
  auto body = gen.gather(writer);
  if (!body.ok()) return reply_status(res, body.status());  // (a client that left reads nothing)
  res.content_type = "application/json";
  res.body = openai::Dump(*body);
}

void OpenAiServer::respond_streaming(Generation& gen, Writer& writer,
                                     const http::Headers& extra_headers) {
  http::Headers headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
  headers.insert(headers.end(), extra_headers.begin(), extra_headers.end());
  if (!writer.StartStream(200, "text/event-stream", headers)) return;
  gen.write_sse(writer);
}

}  // namespace kvserve

#include "runtime/engine.h"

#include <algorithm>
#include <utility>

#include "base/check.h"

namespace kvserve {

using engine_internal::Command;
using engine_internal::Inbox;
using engine_internal::StreamState;

void StreamState::push(StreamEvent ev) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (finished) return;
    if (ev.finished()) finished = true;
    events.push_back(std::move(ev));
  }
  cv.notify_all();
}

void Inbox::push(Command c) {
  {
    std::lock_guard<std::mutex> lock(mu);
    commands.push_back(std::move(c));
    idle = false;
  }
  cv.notify_all();
}

RequestStream::RequestStream(SeqId id, std::shared_ptr<StreamState> state,
                             std::shared_ptr<Inbox> inbox, EngineClock::time_point submitted)
    : id_(id), state_(std::move(state)), inbox_(std::move(inbox)), submitted_(submitted) {}

RequestStream::~RequestStream() {
  bool finished;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    finished = state_->finished;
  }
  if (!finished) {
    Command c;
    c.kind = Command::kAbort;
    c.id = id_;
    inbox_->push(std::move(c));
  }
}

bool RequestStream::Next(StreamEvent* event) {
  if (done_) return false;
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return !state_->events.empty(); });
  *event = std::move(state_->events.front());
  state_->events.pop_front();
  if (event->finished()) done_ = true;
  return true;
}

RequestStream::WaitResult RequestStream::NextFor(StreamEvent* event,
                                                 std::chrono::milliseconds timeout) {
  if (done_) return WaitResult::kDone;
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout, [&] { return !state_->events.empty(); })) {
    return WaitResult::kTimeout;
  }
  *event = std::move(state_->events.front());
  state_->events.pop_front();
  if (event->finished()) done_ = true;
  return WaitResult::kEvent;
}

StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options, LlamaModel* model,
                                                 PagedKvCache* kv, ThreadPool* pool) {
  if (model == nullptr || kv == nullptr || kv->storage == nullptr) {
    return InvalidArgumentError("Engine: no model or KV cache");
  }
  EngineOptions o = options;
  if (o.scheduler.eos_token_ids.empty() && o.tokenizer != nullptr) {
    for (TokenId t = 0; t < model->config().vocab_size; ++t) {
      if (o.tokenizer->IsEndOfGeneration(t)) o.scheduler.eos_token_ids.push_back(t);
    }
  }
  if (o.grammar_vocabulary == nullptr && o.tokenizer != nullptr) {
    o.grammar_vocabulary = grammar::TokenTrie::Build(
        GrammarVocabulary(*o.tokenizer, o.scheduler.eos_token_ids));
  }
  KV_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> core, EngineCore::Create(o, model, kv, pool));
  o.scheduler = core->scheduler_config();
  std::unique_ptr<Engine> engine(new Engine(o, kv, std::move(core)));
  engine->publish_stats();
  engine->thread_ = std::thread([e = engine.get()] { e->loop(); });
  return engine;
}

Engine::Engine(const EngineOptions& options, PagedKvCache* kv, std::unique_ptr<EngineCore> core)
    : options_(options), kv_cache_(kv), core_(std::move(core)),
      inbox_(std::make_shared<Inbox>()) {
  if (options_.tokenizer != nullptr) {
    render_special_.assign(static_cast<size_t>(options_.tokenizer->vocab_size()), 0);
    for (TokenId t : options_.detokenize_special_ids) {
      if (t >= 0 && t < options_.tokenizer->vocab_size()) render_special_[static_cast<size_t>(t)] = 1;
    }
  }
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    inbox_->stopping = true;
  }
  inbox_->cv.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status Engine::validate(const RequestInput& input) const {
  return core_->ValidateInput(input);
}

StatusOr<std::unique_ptr<RequestStream>> Engine::submit(RequestInput input) {
  KV_RETURN_IF_ERROR(validate(input));
  Command c;
  c.kind = Command::kAdd;
  c.id = next_id_.fetch_add(1);
  c.input = std::move(input);
  c.stream = std::make_shared<StreamState>();
  auto stream = std::make_unique<RequestStream>(c.id, c.stream, inbox_, EngineClock::now());
  inbox_->push(std::move(c));
  return stream;
}

void Engine::abort(SeqId id) {
  Command c;
  c.kind = Command::kAbort;
  c.id = id;
  inbox_->push(std::move(c));
}

bool Engine::reset_prefix_cache() {
  Command c;
  c.kind = Command::kResetPrefixCache;
  c.reply = std::make_shared<std::promise<bool>>();
  std::future<bool> done = c.reply->get_future();
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    if (inbox_->stopping) return false;
  }
  inbox_->push(std::move(c));
  // An engine stopping meanwhile drops the command: the promise breaks, or nobody answers.
  if (done.wait_for(std::chrono::seconds(30)) != std::future_status::ready) return false;
  try {
    return done.get();
  } catch (const std::future_error&) {
    return false;
  }
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

EngineStats Engine::wait_until_idle() {
  {
    std::unique_lock<std::mutex> lock(inbox_->mu);
    inbox_->idle_cv.wait(lock, [&] { return inbox_->idle || inbox_->stopping; });
  }
  return stats();
}

void Engine::loop() {
  while (true) {
    std::deque<Command> commands;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(inbox_->mu);
      if (inbox_->commands.empty() && !inbox_->stopping && !core_->has_unfinished()) {
        inbox_->idle = true;
        inbox_->idle_cv.notify_all();
        inbox_->cv.wait(lock, [&] { return !inbox_->commands.empty() || inbox_->stopping; });
      }
      commands.swap(inbox_->commands);
      stopping = inbox_->stopping;
    }
    const EngineClock::time_point pass_start = EngineClock::now();
    for (Command& c : commands) handle(c);
    if (!commands.empty()) publish_stats();  // aborts change the cache without a step
    if (stopping) {
      abort_all("the engine stopped");
      publish_stats();
      std::lock_guard<std::mutex> lock(inbox_->mu);
      inbox_->idle = true;
      inbox_->idle_cv.notify_all();
      return;
    }
    if (core_->has_unfinished()) step(pass_start);
  }
}

void Engine::abort_all(const std::string& why) {
  std::vector<SeqId> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  for (SeqId id : ids) {
    core_->abort_request(id);
    finish_stream(id, FinishReason::kAbort, why);
  }
}

void Engine::handle(Command& c) {
  if (c.kind == Command::kResetPrefixCache) {
    c.reply->set_value(core_->reset_prefix_cache());
    return;
  }
  if (c.kind == Command::kAbort) {
    if (core_->abort_request(c.id)) finish_stream(c.id, FinishReason::kAbort, "");
    return;
  }
  const int64_t num_prompt = static_cast<int64_t>(c.input.prompt_ids.size());
  Live live;
  live.stream = c.stream;
  live.stops = c.input.stop;
  if (c.input.prompt_logits_start >= 0) {
    live.prompt_ids = c.input.prompt_ids;
    live.num_top_logprobs = std::max<int32_t>(0, c.input.logprobs);
  }
  for (const std::string& s : live.stops) live.max_stop_len = std::max(live.max_stop_len, s.size());
  if (options_.tokenizer != nullptr) {
    live.detok =
        std::make_unique<IncrementalDetokenizer>(options_.tokenizer, &render_special_);
    // Prime with the prompt so the continuation decodes as it would after it.
    for (TokenId t : c.input.prompt_ids) live.detok->Push(t);
  }
  Status s = core_->add_request(c.id, std::move(c.input));
  if (!s.ok()) {
    StreamEvent ev;
    ev.finish_reason = FinishReason::kError;
    ev.error = s.message();
    ev.time = EngineClock::now();
    c.stream->push(std::move(ev));
    return;
  }
  num_prompt_tokens_total_ += num_prompt;
  live_.emplace(c.id, std::move(live));
}

void Engine::step(EngineClock::time_point pass_start) {
  EngineCoreStep st = core_->step();
  if (st.scheduled_ids.empty()) {
    // Nothing fits now (should not happen: the scheduler guarantees one full sequence fits).
    publish_stats();
    std::unique_lock<std::mutex> lock(inbox_->mu);
    inbox_->cv.wait_for(lock, std::chrono::milliseconds(1),
                        [&] { return !inbox_->commands.empty() || inbox_->stopping; });
    return;
  }
  for (SeqId id : st.scheduled_ids) {
    auto it = live_.find(id);
    if (it != live_.end() && it->second.first_scheduled_time == EngineClock::time_point{}) {
      it->second.first_scheduled_time = st.scheduled_time;
    }
  }
  for (const RequestOutput& r : st.outputs) {
    if (r.finish_reason == FinishReason::kError) {
      finish_stream(r.id, FinishReason::kError, r.error);
    } else {
      publish(r);
    }
  }
  publish_stats();
  if (options_.on_step) {
    options_.on_step(st, std::chrono::duration<double>(EngineClock::now() - pass_start).count());
  }
}

void Engine::publish(const RequestOutput& out) {
  auto it = live_.find(out.id);
  if (it == live_.end()) return;
  Live& live = it->second;
  StreamEvent ev;
  ev.token_ids = out.new_token_ids;
  ev.logprobs = out.logprobs;
  if (const PromptLogits& pl = out.prompt_logits; pl.num_rows > 0 && !live.prompt_ids.empty()) {
    // Row r predicts prompt token first_position + r + 1: the logprobs of the prompt, turned
    // into token logprobs here so that no vocabulary-sized rows reach the stream.
    const int64_t vocab = static_cast<int64_t>(pl.rows.size()) / pl.num_rows;
    ev.prompt_logprobs_first = pl.first_position + 1;
    for (int64_t r = 0; r < pl.num_rows; ++r) {
      const TokenId next = live.prompt_ids[static_cast<size_t>(pl.first_position + r + 1)];
      ev.prompt_logprobs.push_back(ComputeLogprobs(pl.rows.data() + r * vocab, vocab, next,
                                                   live.num_top_logprobs));
    }
  }
  ev.first_scheduled_time = live.first_scheduled_time;
  ev.num_cached_prompt_tokens = out.num_cached_prompt_tokens;
  std::copy_n(out.num_cached_prompt_tokens_by_tier, kNumKvTiers,
              ev.num_cached_prompt_tokens_by_tier);
  ev.num_kv_tokens_evicted = out.num_kv_tokens_evicted;
  num_generated_tokens_total_ += static_cast<int64_t>(out.new_token_ids.size());
  FinishReason finish = out.finish_reason;
  const bool has_stops = live.max_stop_len > 0;
  if (live.detok != nullptr) {
    for (TokenId t : out.new_token_ids) {
      if (out.finished() && t == out.stop_token_id) continue;  // EOS / stop token: no text
      live.text += live.detok->Push(t);
    }
    if (finish != FinishReason::kNone) live.text += live.detok->Flush();
    if (has_stops) {
      // Look for a stop string that may end in the new text.
      const std::vector<std::string>* stops = &live.stops;
      size_t cut = std::string::npos;
      if (stops != nullptr) {
        const size_t from =
            live.text_sent > live.max_stop_len ? live.text_sent - live.max_stop_len : 0;
        for (const std::string& s : *stops) {
          if (s.empty()) continue;
          const size_t p = live.text.find(s, from);
          if (p != std::string::npos) cut = std::min(cut, p);
        }
      }
      if (cut != std::string::npos) {
        live.text.resize(cut);
        if (!out.finished()) core_->finish_request(out.id, FinishReason::kStop);
        finish = FinishReason::kStop;
      }
      // Hold back what could still be the start of a stop string, unless finished.
      size_t end = live.text.size();
      if (finish == FinishReason::kNone) {
        end = live.text.size() > live.max_stop_len - 1 ? live.text.size() - (live.max_stop_len - 1)
                                                       : 0;
      }
      if (end > live.text_sent) {
        ev.text = live.text.substr(live.text_sent, end - live.text_sent);
        live.text_sent = end;
      }
    } else {
      ev.text = std::move(live.text);
      live.text.clear();
    }
  }
  ev.finish_reason = finish;
  ev.time = EngineClock::now();
  live.stream->push(std::move(ev));
  if (finish != FinishReason::kNone) live_.erase(it);
}

void Engine::finish_stream(SeqId id, FinishReason reason, const std::string& error) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  StreamEvent ev;
  ev.finish_reason = reason;
  ev.error = error;
  ev.time = EngineClock::now();
  ev.first_scheduled_time = it->second.first_scheduled_time;
  it->second.stream->push(std::move(ev));
  live_.erase(it);
}

void Engine::publish_stats() {
  EngineStats s;
  const SchedulerStats ss = core_->scheduler().stats();
  const KvCacheManager& kv = core_->kv_manager();
  const KvCacheManagerStats ks = kv.stats();
  s.num_running = ss.num_running;
  max_num_running_ = std::max(max_num_running_, ss.num_running);
  s.max_num_running = max_num_running_;
  s.num_waiting = ss.num_waiting;
  s.num_steps = ss.num_steps;
  s.num_preemptions_total = ss.num_preemptions_total;
  s.num_prefix_deferrals_total = ss.num_prefix_deferrals_total;
  s.num_blocks = ks.num_blocks;
  s.blocks_in_use = ks.blocks_in_use;
  s.blocks_cached = ks.blocks_cached;
  s.kv_usage = ks.num_blocks > 0 ? static_cast<double>(ks.blocks_in_use) / ks.num_blocks : 0.0;
  s.prefix_queries_tokens = ks.prefix_queries_tokens;
  s.prefix_hits_tokens = ks.prefix_hits_tokens;
  s.num_prompt_tokens_total = num_prompt_tokens_total_;
  s.num_generated_tokens_total = num_generated_tokens_total_;
  s.num_sequences_in_cache = kv.num_sequences();
  s.kv = ks;
  s.memory = core_->memory_stats();
  s.clipped_values_total = kv_cache_->storage->quant_stats().total_clipped();
  s.grammar_tokens_total = core_->num_grammar_tokens_total();
  s.grammar_seconds_total = core_->grammar_seconds_total();
  if (const KvTierConnector* t = core_->kv_tier_connector(); t != nullptr) {
    s.kv_tier_engine = t->stats();
    // The memory tier's own hits: every prefix hit the other tiers did not bring in.
    KvTierEngineStats& e = s.kv_tier_engine;
    e.hit_tokens[static_cast<int>(KvTier::kMemory)] =
        std::max<int64_t>(0, ks.prefix_hits_tokens - e.hit_tokens[static_cast<int>(KvTier::kDisk)] -
                                 e.hit_tokens[static_cast<int>(KvTier::kRedis)]);
  }
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_ = s;
}

}  // namespace kvserve

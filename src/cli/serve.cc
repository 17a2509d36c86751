// `kvserve serve`: loads the model, sizes the paged KV cache, starts the engine and the
// OpenAI-compatible HTTP server (server/server.h), and shuts down cleanly on SIGTERM/SIGINT.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "chat/model_chat_templates.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/kv_eviction_flags.h"
#include "cli/kv_flags.h"
#include "cli/model_setup.h"
#include "cli/scheduler_flags.h"
#include "cost/step_log.h"
#include "kernels/kernels.h"
#include "model/llama.h"
#include "model/synthetic.h"
#include "kvevents/kv_events_publisher.h"
#include "runtime/embedder.h"
#include "runtime/engine.h"
#include "runtime/engine_policy.h"
#include "runtime/kv_tiers_setup.h"
#include "server/server.h"
#include "toolcall/tool_call_parser.h"

namespace kvserve::cli {
namespace {

struct ServeOptions {
  std::string model_path;  // empty: the built-in default model
  std::string tokenizer_path;
  std::string served_model_name;
  http::HttpServerOptions http;  // --host, --port, connection cap, HTTP deadlines
  std::string api_key;
  KvCacheFlags kv;
  KvEvictionFlags eviction;  // the default policy of requests without "kv_policy"
  double gpu_memory_utilization = -1.0;  // < 0: not given
  SchedulerFlags scheduler;
  int64_t max_queue_len = 256;
  int64_t kv_default_sequences = 8;
  int threads = 0;
  std::string chat_template_path;
  double shutdown_timeout_s = 30.0;
  ChatOutputFlags chat_output;  // --enable-auto-tool-choice, --tool-call-parser, --reasoning-parser
  // The response cache (tier 1): --semantic-cache and its bounds.
  bool semantic_cache = false;
  float semantic_cache_threshold = 0.96f;
  int64_t semantic_cache_max_entries = 100000;
  double semantic_cache_ttl_s = 3600.0;
  int32_t semantic_cache_ef_search = semcache::SemanticCacheOptions{}.hnsw_ef_search;
  // An embedding model beside the generator (/v1/embeddings and semantic cache hits).
  std::string embedding_model_path;
  std::string embedding_model_name;  // empty: the path
  int embedding_threads = 0;         // 0: 1 beside a generator, all when serving it alone
  std::string kv_events_config;      // vLLM's --kv-events-config JSON; empty: off
  // KV tiers beyond memory: --kv-offload-dir/--kv-offload-bytes (disk), --kv-redis.
  KvTierFlags kv_tiers;
  std::string kv_offload_bytes;  // parsed into kv_tiers.offload_bytes ("64G", "512MiB")
  std::string step_log_path;     // --step-log: every engine step and its seconds; empty: off
};


// Blocks SIGTERM/SIGINT in this thread (and so in every thread started after), and waits for
// them on a watcher thread that calls `on_signal` once.
class SignalWatcher {
 public:
  SignalWatcher() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    signal(SIGPIPE, SIG_IGN);  // a client that went away must not kill the server
  }
  ~SignalWatcher() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  void Start(std::function<void(int)> on_signal) {
    thread_ = std::thread([this, on_signal] {
      while (!stop_) {
        timespec timeout{0, 200 * 1000 * 1000};
        const int sig = sigtimedwait(&set_, nullptr, &timeout);
        if (sig > 0) {
          on_signal(sig);
          return;
        }
      }
    });
  }

 private:
  sigset_t set_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// What a generator needs to run, kept alive while the server serves (declaration order is
// destruction order reversed: the engine goes before the KV cache, the model and the pool).
struct GeneratorStack {
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ThreadPool> pool;
  std::optional<PagedKvCache> kv;
  std::unique_ptr<toolcall::ToolCallParser> tool_call_parser;
  std::shared_ptr<KvEventPublisher> kv_events;  // fed by the engine: outlives it
  std::unique_ptr<KvTierManager> kv_tiers;      // used by the engine: outlives it
  std::unique_ptr<cost::StepLogWriter> step_log;  // written by the engine: outlives it
  std::unique_ptr<Engine> engine;
  std::string banner;  // the "serve: model ..." line
};

// Chat template, KV cache and engine for a generator; fills the generator's part of `so`.
Status SetUpGenerator(const ServeOptions& o, CommandModel loaded, int threads, ServerOptions* so,
                      GeneratorStack* g) {
  g->model = std::move(loaded.model);
  g->tokenizer = std::move(loaded.tokenizer);
  const Tokenizer* tokenizer = g->tokenizer.get();

  // Chat template: --chat-template, else the model's, else ChatML.
  auto token_text = [&](TokenId id) {
    return id >= 0 && id < tokenizer->vocab_size() ? tokenizer->spec().tokens[id] : std::string();
  };
  auto chat_or = ModelChatTemplates::Load(o.model_path, o.chat_template_path,
                                          token_text(tokenizer->bos_id()),
                                          token_text(tokenizer->eos_id()));
  if (!chat_or.ok()) return chat_or.status();
  auto chat = std::make_shared<const ModelChatTemplates>(std::move(chat_or).value());
  if (chat->is_chatml_fallback()) {
    std::fprintf(stderr,
                 "note: the model has no chat template; /v1/chat/completions uses ChatML.\n");
  }
  // Tool calls and reasoning: the flags against the template.
  std::string tools_banner;
  auto chat_output =
      ResolveChatOutput(o.chat_output, chat->tools_source(), &g->tool_call_parser, &tools_banner);
  if (!chat_output.ok()) return chat_output.status();

  // The API name: the flag, else the --model path (as vLLM), else the built-in model's name
  // without its "(random weights)" note ("builtin-tiny").
  const std::string& model_name = g->model->config().name;
  const std::string name = !o.served_model_name.empty() ? o.served_model_name
                           : o.model_path.empty() ? model_name.substr(0, model_name.find(' '))
                                                  : o.model_path;

  // KV cache.
  g->pool = std::make_unique<ThreadPool>(threads);
  auto kv_config = ResolveKvCacheFlags(o.kv);
  if (!kv_config.ok()) return kv_config.status();
  const StatusOr<KvEvictionPolicy> policy = ResolveKvEvictionFlags(o.eviction);
  if (!policy.ok()) return policy.status();
  EngineConfigOptions eco;
  eco.kv = *kv_config;
  if (o.gpu_memory_utilization >= 0.0) eco.kv.memory_utilization = o.gpu_memory_utilization;
  eco.scheduler = o.scheduler;
  eco.default_num_sequences = o.kv_default_sequences;
  auto config = ResolveEngineConfig(eco, *g->model, tokenizer);
  if (!config.ok()) return config.status();
  auto kv = CreateKvCacheWithBanner(*g->model, tokenizer, config->kv, g->pool.get());
  if (!kv.ok()) return kv.status();
  g->kv.emplace(std::move(kv).value());
  // Commit the KV pages now: the resident size is then stable from the first request on.
  const auto commit_start = std::chrono::steady_clock::now();
  g->kv->storage->CommitMemory();
  std::fprintf(stderr, "KV cache: %s committed in %.2f s\n",
               HumanBytes(g->kv->storage->total_bytes()).c_str(), SecondsSince(commit_start));

  // KV events for cache-aware routers (vLLM's --kv-events-config).
  std::string kv_events_banner = "KV events: off (--kv-events-config)";
  if (!o.kv_events_config.empty()) {
    auto kc = ParseKvEventsConfig(o.kv_events_config);
    if (!kc.ok()) return kc.status();
    if (kc->enable_kv_cache_events) {
      auto pub = KvEventPublisher::Create(*kc, g->kv->spec.block_size);
      if (!pub.ok()) return pub.status();
      g->kv_events = std::move(pub).value();
      kv_events_banner =
          kc->publisher == "null"
              ? std::string("KV events: recorded, not sent (publisher \"null\")")
              : "KV events: ZeroMQ PUB " + g->kv_events->endpoint() + ", topic '" + kc->topic +
                    "'" +
                    (kc->replay_endpoint.has_value()
                         ? ", replay " + g->kv_events->replay_endpoint()
                         : std::string(", no replay socket")) +
                    " (vLLM's BlockStored / BlockRemoved / AllBlocksCleared, msgpack)";
    }
  }

  // Engine.
  EngineOptions eo;
  static_cast<EngineCoreOptions&>(eo) = config->core;

  // KV tiers beyond memory: a disk folder that survives restarts, a Redis shared by replicas.
  std::string tiers_banner = "KV tiers: memory only (--kv-offload-dir, --kv-redis)";
  if (o.kv_tiers.enabled() || !o.kv_offload_bytes.empty()) {
    KvTierFlags tf = o.kv_tiers;
    if (!o.kv_offload_bytes.empty()) {
      auto bytes = ParseByteSize(o.kv_offload_bytes);
      if (!bytes.ok()) return InvalidArgumentError("--kv-offload-bytes: " + bytes.status().message());
      tf.offload_bytes = *bytes;
    }
    uint64_t fingerprint = 0;
    {
      ProgressLine progress("KV tiers: fingerprinting the model");
      fingerprint = KvTierFingerprint(*g->model, &tokenizer->spec(), *g->kv->storage,
                                      progress.Callback());
    }
    std::function<void(std::vector<KvCacheEvent>)> disk_events;
    if (g->kv_events != nullptr) {
      disk_events = [pub = g->kv_events.get()](std::vector<KvCacheEvent> events) {
        pub->Publish(std::move(events));
      };
    }
    auto tiers = CreateKvTiers(tf, fingerprint, *g->kv->storage, std::move(disk_events));
    if (!tiers.ok()) return tiers.status();
    g->kv_tiers = std::move(tiers).value();
    eo.kv_tiers = g->kv_tiers.get();
    eo.kv_tier_load_timeout = std::chrono::milliseconds(tf.load_timeout_ms);
    so->kv_tiers = g->kv_tiers.get();
    // A file size limit (ulimit -f) then fails the write (EFBIG) instead of killing the server.
    std::signal(SIGXFSZ, SIG_IGN);
    tiers_banner = "KV tiers: " + g->kv_tiers->description() + "; loads wait at most " +
                   std::to_string(tf.load_timeout_ms) + " ms";
  }
  eo.tokenizer = tokenizer;
  eo.detokenize_special_ids = MarkupTokenIds(*tokenizer);
  if (g->kv_events != nullptr) {
    eo.on_kv_events = [pub = g->kv_events.get()](std::vector<KvCacheEvent> events) {
      pub->Publish(std::move(events));
    };
  }
  if (!o.step_log_path.empty()) {
    cost::StepLogHeader header;
    header.model = model_name;
    header.kv_cache_dtype = DTypeName(g->kv->spec.dtype);
    header.block_size = g->kv->spec.block_size;
    header.threads = threads;
    header.simd_level = kernels::SimdLevelName();
    auto writer = cost::StepLogWriter::Open(o.step_log_path, header);
    if (!writer.ok()) return writer.status();
    g->step_log = std::move(writer).value();
    eo.on_step = [log = g->step_log.get()](const EngineCoreStep& step, double seconds) {
      cost::LoggedStep logged{seconds, {}};
      for (const ScheduledWork& w : step.work) {
        logged.seqs.push_back({w.num_kv_slots, w.num_new_tokens, w.samples});
      }
      log->Write(logged);
    };
    std::fprintf(stderr, "serve: step log: %s (every engine step and its seconds, for "
                 "`kvserve profile --refit`)\n", o.step_log_path.c_str());
  }
  auto engine = Engine::Create(eo, g->model.get(), &*g->kv, g->pool.get());
  if (!engine.ok()) return engine.status();
  g->engine = std::move(engine).value();
  const SchedulerConfig& sc = g->engine->scheduler_config();

  so->kv_events = g->kv_events;
  so->kv_policy = *policy;
  if (policy->method != KvEvictionMethod::kNone) {
    std::fprintf(stderr, "kv eviction (default of requests): %s\n", policy->ToString().c_str());
  }
  so->served_model_name = name;
  const PagedKvCache& c = *g->kv;
  so->kv.dtype = DTypeName(c.spec.dtype);
  so->kv.block_size = c.spec.block_size;
  so->kv.num_blocks = c.num_blocks();
  so->kv.bytes_per_token = c.spec.bytes_per_token();
  so->kv.layout = KvLayoutName(c.spec.layout);
  so->kv.values_per_token_per_layer = c.spec.values_per_token_per_layer();
  so->kv.num_layers = c.spec.num_layers;
  so->kv.num_kv_heads = c.spec.num_kv_heads;
  so->kv.scales = c.storage->scales();
  so->chat_output = *chat_output;
  so->render_chat = [chat](const openai::ChatRequest& req) -> StatusOr<std::string> {
    ChatTemplateInputs in;
    in.messages = req.messages;
    if (!req.tools.is_null()) in.tools = req.tools;
    in.add_generation_prompt = req.add_generation_prompt;
    if (req.chat_template_kwargs.is_object()) in.extra = req.chat_template_kwargs;
    return chat->Render(std::move(in));
  };
  char line[2048];
  std::snprintf(line, sizeof(line),
                "serve: model '%s'; max model len %lld tokens; --max-num-seqs %lld, "
                "--max-num-batched-tokens %lld, --max-queue-len %lld; prefix caching %s, chunked "
                "prefill %s; %d threads; API key %s; chat template: %s\nserve: %s\nserve: %s\n"
                "serve: %s\n",
                name.c_str(), static_cast<long long>(c.max_model_len),
                static_cast<long long>(sc.max_num_seqs),
                static_cast<long long>(sc.max_num_batched_tokens),
                static_cast<long long>(o.max_queue_len), eo.enable_prefix_caching ? "on" : "off",
                sc.enable_chunked_prefill ? "on" : "off", threads,
                o.api_key.empty() ? "off" : "required", chat->description().c_str(),
                tools_banner.c_str(), kv_events_banner.c_str(), tiers_banner.c_str());
  g->banner = line;
  return OkStatus();
}

int RunServe(const ServeOptions& o) {
  Status scheduler_flags = ValidateSchedulerFlags(o.scheduler);
  if (!scheduler_flags.ok()) return ReportError(scheduler_flags);
  if (o.max_queue_len < 0) return ReportError(InvalidArgumentError("--max-queue-len must be >= 0"));
  if (o.http.port < 0 || o.http.port > 65535) {
    return ReportError(InvalidArgumentError("--port must be in [0, 65535]"));
  }
  SignalWatcher signals;  // before any thread starts
  const int threads = o.threads > 0 ? o.threads : ThreadPool::HardwareThreads();

  // 1. The model: a generator, or an embedding model served alone.
  CommandModelOptions mo;
  mo.model_path = o.model_path;
  mo.tokenizer_path = o.tokenizer_path;
  mo.require_tokenizer = true;
  mo.allow_encoder = true;
  auto loaded_or = LoadCommandModel(mo);
  if (!loaded_or.ok()) return ReportError(loaded_or.status());
  const bool embeddings_only = loaded_or->encoder.has_value();

  // 2. The embedding model: --model EMBEDDER (all threads) or --embedding-model beside the
  // generator (--embedding-threads, default 1, beside the engine's).
  std::shared_ptr<const Embedder> embedder;
  std::string embedding_name;
  Embedder::Options emo;
  if (embeddings_only) {
    if (!o.embedding_model_path.empty()) {
      return ReportError(InvalidArgumentError(
          "--model '" + o.model_path + "' is an embedding model; --embedding-model is for an "
          "embedding model beside a generator"));
    }
    emo.threads = o.embedding_threads > 0 ? o.embedding_threads : threads;
    auto e = Embedder::Create(std::move(*loaded_or->encoder), emo);
    if (!e.ok()) return ReportError(e.status());
    embedder = std::move(e).value();
    embedding_name = !o.served_model_name.empty() ? o.served_model_name : o.model_path;
  } else if (!o.embedding_model_path.empty()) {
    const auto start = std::chrono::steady_clock::now();
    auto loaded = LoadModelWithProgress(o.embedding_model_path, "");
    if (!loaded.ok()) return ReportError(loaded.status().WithContext("--embedding-model"));
    PrintModelSummary(*loaded, SecondsSince(start));
    emo.threads = o.embedding_threads > 0 ? o.embedding_threads : 1;
    auto e = Embedder::Create(std::move(loaded).value(), emo);
    if (!e.ok()) return ReportError(e.status().WithContext("--embedding-model"));
    embedder = std::move(e).value();
    embedding_name = !o.embedding_model_name.empty() ? o.embedding_model_name
                                                     : o.embedding_model_path;
  }

  // 3. The generator's chat template, KV cache and engine.
  ServerOptions so;
  GeneratorStack g;
  if (!embeddings_only) {
    Status s = SetUpGenerator(o, std::move(loaded_or).value(), threads, &so, &g);
    if (!s.ok()) return ReportError(s);
  }
  const Tokenizer* tokenizer = embeddings_only ? &embedder->tokenizer() : g.tokenizer.get();

  // 4. HTTP server.
  so.http = o.http;
  so.api_key = o.api_key;
  so.max_queue_len = o.max_queue_len;
  so.shutdown_timeout_s = o.shutdown_timeout_s;
  so.simd_level = kernels::SimdLevelName();
  so.cpu_simd_level = kernels::CpuSimdLevelName();
  so.f16_weights_as_bf16 = kernels::F16WeightsAsBf16();
  so.embedder = embedder;
  so.embedding_model_name = embedding_name;
  if (o.semantic_cache && !embeddings_only) {
    semcache::SemanticCacheOptions sco;
    sco.max_entries = o.semantic_cache_max_entries;
    sco.ttl_seconds = o.semantic_cache_ttl_s;
    sco.hnsw_ef_search = o.semantic_cache_ef_search;
    if (embedder != nullptr) sco.dim = static_cast<int32_t>(embedder->dim());
    so.response_cache.cache = std::make_shared<semcache::SemanticCache>(sco);
    so.response_cache.threshold = o.semantic_cache_threshold;
  }
  OpenAiServer server(so, g.engine.get(), tokenizer);
  Status bound = server.Bind();
  if (!bound.ok()) return ReportError(bound);

  if (!embeddings_only) std::fprintf(stderr, "%s", g.banner.c_str());
  if (embedder != nullptr) {
    std::fprintf(stderr,
                 "serve: embedding model '%s' (/v1/embeddings%s): %lld dims, %s pooling, "
                 "L2-normalised, at most %lld tokens per input, %d threads\n",
                 embedding_name.c_str(), embeddings_only ? " only" : "",
                 static_cast<long long>(embedder->dim()), PoolingTypeName(embedder->pooling()),
                 static_cast<long long>(embedder->max_tokens()), embedder->num_threads());
  }
  if (o.semantic_cache && embeddings_only) {
    std::fprintf(stderr, "serve: --semantic-cache ignored: nothing is generated\n");
  } else if (o.semantic_cache) {
    char similar[512] = " only (no --embedding-model: no similarity hits)";
    if (embedder != nullptr) {
      std::snprintf(similar, sizeof(similar), ", and similar requests (cosine >= %.3g by '%s')",
                    o.semantic_cache_threshold, embedding_name.c_str());
    }
    std::fprintf(stderr,
                 "serve: response cache (tier 1): exact repeats%s; up to %lld entries, TTL "
                 "%.0f s; by default for requests with temperature 0 or a seed and n = 1\n",
                 similar, static_cast<long long>(o.semantic_cache_max_entries),
                 o.semantic_cache_ttl_s);
  } else {
    std::fprintf(stderr, "serve: response cache (tier 1): off (--semantic-cache)\n");
  }
  std::fprintf(stderr,
               "serve: HTTP: --max-connections %lld, request body <= %s, header <= %s; "
               "deadlines: header %.0f s, body %.0f s, keep-alive idle %.0f s\n",
               static_cast<long long>(server.max_connections()),
               HumanBytes(o.http.max_body_bytes).c_str(),
               HumanBytes(o.http.max_header_bytes).c_str(), o.http.header_timeout_s,
               o.http.body_timeout_s, o.http.idle_timeout_s);
  std::fprintf(stderr,
               "serve: listening on %s (OpenAI API under /v1, metrics at /metrics, health at "
               "/health). Stop with Ctrl-C or SIGTERM.\n",
               server.url().c_str());
  std::fflush(stderr);

  std::atomic<int> signal_seen{0};
  signals.Start([&](int sig) {
    signal_seen = sig;
    std::fprintf(stderr, "serve: %s received: draining (up to %.0f s), then stopping\n",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT", o.shutdown_timeout_s);
    server.Shutdown();
  });
  Status ran = server.Run();
  if (!ran.ok()) return ReportError(ran);
  if (g.engine != nullptr) {
    const EngineStats st = g.engine->stats();
    std::fprintf(stderr, "serve: stopped; %lld tokens generated, %lld preemptions\n",
                 static_cast<long long>(st.num_generated_tokens_total),
                 static_cast<long long>(st.num_preemptions_total));
  } else {
    std::fprintf(stderr, "serve: stopped\n");
  }
  return 0;
}

}  // namespace

void AddServeCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Serve the model over an OpenAI-compatible HTTP API (/v1/completions, "
      "/v1/chat/completions, /v1/embeddings, /v1/models), with /tokenize, /detokenize, /health and Prometheus "
      "/metrics. Without --model, serves a built-in model with RANDOM weights.");
  cmd->add_option("-m,--model", o->model_path,
                  "Model: GGUF file, llama2.c checkpoint (.bin) or Hugging Face folder; an embedding "
                  "model (bert) serves /v1/embeddings only");
  cmd->add_option("--tokenizer", o->tokenizer_path,
                  "Tokenizer file overriding the model's (tokenizer.json, llama2.c .bin, GGUF)");
  cmd->add_option("--served-model-name", o->served_model_name,
                  "The model name in the API (default: the --model path, or the built-in "
                  "model's name)");
  cmd->add_option("--host", o->http.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->http.port, "Port to listen on (0: any free port)")
      ->capture_default_str();
  cmd->add_option("--max-connections", o->http.max_connections,
                  "Open HTTP connections at most; more get 503 and are closed (lowered to fit the "
                  "file-descriptor limit)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--timeout-keep-alive", o->http.idle_timeout_s,
                  "Seconds an idle keep-alive connection is kept open between requests")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--http-header-timeout", o->http.header_timeout_s,
                  "Seconds a client may take to send a request header (then 408 and close)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--http-body-timeout", o->http.body_timeout_s,
                  "Seconds a client may take to send a request body (then 408 and close)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--api-key", o->api_key,
                  "Require 'Authorization: Bearer KEY' on /v1 and /tokenize requests "
                  "(default: none)");
  AddKvCacheFlags(cmd, &o->kv);
  AddKvEvictionFlags(cmd, &o->eviction);
  cmd->add_option("--gpu-memory-utilization", o->gpu_memory_utilization,
                  "vLLM's name for --memory-utilization: the fraction of the memory left after "
                  "weights and workspace that the KV cache may use")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--kv-default-sequences", o->kv_default_sequences,
                  "Without --kv-cache-memory or --(gpu-)memory-utilization: size the KV cache "
                  "for this many full --max-model-len sequences (at most --max-num-seqs)")
      ->capture_default_str();
  AddSchedulerFlags(cmd, &o->scheduler);
  cmd->add_option("--max-queue-len", o->max_queue_len,
                  "Requests that may wait beyond the --max-num-seqs running ones; more get HTTP "
                  "503")
      ->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "Compute threads (default: all available)");
  cmd->add_option("--chat-template", o->chat_template_path,
                  "Jinja chat template file overriding the model's (default: the model's, else "
                  "ChatML)");
  cmd->add_flag("--enable-auto-tool-choice", o->chat_output.enable_auto_tool_choice,
               "Parse tool calls from the model's output for requests with tools and "
               "tool_choice \"auto\" (vLLM's flag); tool_choice \"required\" or a named function "
               "works without it");
  {
    std::string names;
    for (const std::string& n : toolcall::ToolCallParserNames()) names += (names.empty() ? "" : ", ") + n;
    cmd->add_option("--tool-call-parser", o->chat_output.tool_call_parser,
                    "The model's tool-call format (" + names +
                        "); default: detected from the chat template. Needs "
                        "--enable-auto-tool-choice");
  }
  cmd->add_option("--reasoning-parser", o->chat_output.reasoning_parser,
                  "Split <think>...</think> (or the model's reasoning markers) into "
                  "reasoning_content: deepseek_r1, qwen3, command_r, mistral, or auto (from the "
                  "chat template)");
  cmd->add_option("--embedding-model", o->embedding_model_path,
                  "An embedding model (bert GGUF file or Hugging Face BertModel folder) beside the "
                  "generator: serves /v1/embeddings and gives --semantic-cache its similarity "
                  "hits. (--model EMBEDDER alone serves embeddings only.)");
  cmd->add_option("--embedding-model-name", o->embedding_model_name,
                  "The embedding model's name in the API (default: its path)");
  cmd->add_option("--embedding-threads", o->embedding_threads,
                  "Threads of the embedding model (default: 1 beside a generator, all when it "
                  "is served alone)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--semantic-cache", o->semantic_cache,
               "Serve repeated requests from a response cache in front of the engine (tier 1): "
               "exact repeats, and with --embedding-model similar requests; by default only requests with temperature 0 or a seed and n = 1 "
               "(a request opts in or out with \"semantic_cache\": {\"mode\": ...})");
  cmd->add_option("--semantic-cache-threshold", o->semantic_cache_threshold,
                  "Least cosine similarity of a semantic hit (with an embedding model)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--semantic-cache-max-entries", o->semantic_cache_max_entries,
                  "Responses the cache keeps (least recently used dropped first)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--semantic-cache-ttl", o->semantic_cache_ttl_s,
                  "Seconds a stored response stays valid (0: until evicted)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--kv-events-config", o->kv_events_config,
                  "Publish KV cache events for cache-aware routers, as vLLM does: a JSON object "
                  "such as '{\"enable_kv_cache_events\": true, \"endpoint\": \"tcp://*:5557\", "
                  "\"topic\": \"kv@pod@model\", \"replay_endpoint\": \"tcp://*:5558\"}' "
                  "(ZeroMQ PUB, msgpack; see docs/kv-events.md)");
  cmd->add_option("--step-log", o->step_log_path,
                  "Write every engine step to this file as JSON lines: each scheduled request's "
                  "KV slots, new tokens and whether it sampled, and the step's seconds; "
                  "`kvserve profile --refit PROFILE --step-log FILE` fits a profile to them "
                  "(see docs/cost.md)");
  cmd->add_option("--kv-offload-dir", o->kv_tiers.offload_dir,
                  "Disk tier: keep every full KV block of the prefix cache in this folder too "
                  "(stored dtype, checksummed, keyed by the model's fingerprint), so blocks "
                  "evicted from memory and those of an earlier run are read back instead of "
                  "recomputed (see docs/kv-tiers.md)");
  cmd->add_option("--kv-offload-bytes", o->kv_offload_bytes,
                  "Disk tier budget (e.g. 20G): least recently used blocks are deleted beyond it");
  cmd->add_option("--kv-redis", o->kv_tiers.redis_url,
                  "Shared tier: publish full KV blocks to this Redis and fetch the ones memory "
                  "and disk lack (redis://[:password@]host[:port][/db] or unix:///path); "
                  "replicas of the same model share prefixes through it");
  cmd->add_option("--kv-redis-ttl", o->kv_tiers.redis_ttl_seconds,
                  "Seconds a block lives in Redis (0: until Redis evicts it; give Redis a "
                  "maxmemory and an allkeys-lru policy for a byte budget)")
      ->capture_default_str();
  cmd->add_option("--kv-redis-timeout-ms", o->kv_tiers.redis_timeout_ms,
                  "Per-command Redis timeout: a slower or absent Redis counts as a miss")
      ->capture_default_str();
  cmd->add_option("--kv-tier-load-timeout-ms", o->kv_tiers.load_timeout_ms,
                  "Longest a request waits for its blocks from disk or Redis before it "
                  "recomputes them")
      ->capture_default_str();
  cmd->add_option("--semantic-cache-ef-search", o->semantic_cache_ef_search,
                  "HNSW search breadth of semantic lookups: higher finds more of the stored "
                  "neighbours in large caches, at a cost about linear in it")
      ->capture_default_str()
      ->check(CLI::Range(8, 4096));
  cmd->add_option("--shutdown-timeout", o->shutdown_timeout_s,
                  "On SIGTERM/SIGINT: seconds in-flight requests may take to finish before they "
                  "are aborted")
      ->capture_default_str();
  cmd->callback([o, exit_code]() { *exit_code = RunServe(*o); });
}

}  // namespace kvserve::cli

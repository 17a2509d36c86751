// `kvserve serve`: loads the model, sizes the paged KV cache, starts the engine and the
// OpenAI-compatible HTTP server (server/server.h), and shuts down cleanly on SIGTERM/SIGINT.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "chat/chat_template.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/kv_flags.h"
#include "cli/scheduler_flags.h"
#include "model/llama.h"
#include "model/synthetic.h"
#include "runtime/engine.h"
#include "server/server.h"

namespace kvserve::cli {
namespace {

struct ServeOptions {
  std::string model_path;  // empty: the built-in default model
  std::string tokenizer_path;
  std::string served_model_name;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  KvCacheFlags kv;
  double gpu_memory_utilization = -1.0;  // < 0: not given
  SchedulerFlags scheduler;
  int64_t max_queue_len = 256;
  int64_t kv_default_sequences = 8;
  int threads = 0;
  std::string chat_template_path;
  double shutdown_timeout_s = 30.0;
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

// The chat templates a server renders with, parsed once (ChatTemplate is immutable and
// thread-safe to render).
struct ServeChat {
  LoadedChatTemplate loaded;
  std::optional<ChatTemplate> main;
  std::optional<ChatTemplate> tool_use;
  std::string description;  // for the banner
};

// --chat-template FILE, else the model's own template, else ChatML. bos/eos fall back to the
// tokenizer's token texts.
StatusOr<std::shared_ptr<ServeChat>> LoadServeChat(const std::string& model_path,
                                                   const std::string& template_file,
                                                   const Tokenizer& tokenizer) {
  auto chat = std::make_shared<ServeChat>();
  if (model_path.empty() && template_file.empty()) {
    chat->loaded.source = kChatMlTemplateSource;
    chat->loaded.is_chatml_fallback = true;
    chat->loaded.origin = "chatml";
  } else {
    KV_ASSIGN_OR_RETURN(chat->loaded, LoadChatTemplate(model_path, template_file));
  }
  auto token_text = [&](TokenId id) {
    return id >= 0 && id < tokenizer.vocab_size() ? tokenizer.spec().tokens[id] : std::string();
  };
  if (chat->loaded.bos_token.empty()) chat->loaded.bos_token = token_text(tokenizer.bos_id());
  if (chat->loaded.eos_token.empty()) chat->loaded.eos_token = token_text(tokenizer.eos_id());
  auto main = ChatTemplate::FromString(chat->loaded.source);
  if (!main.ok()) return main.status().WithContext("chat template (" + chat->loaded.origin + ")");
  chat->main = std::move(main).value();
  if (chat->loaded.tool_use_source) {
    auto tools = ChatTemplate::FromString(*chat->loaded.tool_use_source);
    if (!tools.ok()) return tools.status().WithContext("chat template (tool_use)");
    chat->tool_use = std::move(tools).value();
  }
  chat->description = chat->loaded.is_chatml_fallback ? "ChatML (the model has none)"
                      : template_file.empty()         ? "the model's (" + chat->loaded.origin + ")"
                                                      : template_file;
  return chat;
}

int RunServe(const ServeOptions& o) {
  Status scheduler_flags = ValidateSchedulerFlags(o.scheduler);
  if (!scheduler_flags.ok()) return ReportError(scheduler_flags);
  if (o.max_queue_len < 0) return ReportError(InvalidArgumentError("--max-queue-len must be >= 0"));
  if (o.port < 0 || o.port > 65535) {
    return ReportError(InvalidArgumentError("--port must be in [0, 65535]"));
  }
  SignalWatcher signals;  // before any thread starts

  // 1. Model and tokenizer.
  const auto load_start = std::chrono::steady_clock::now();
  LoadedModel loaded;
  if (o.model_path.empty()) {
    loaded = MakeBuiltinDefaultModel();
    std::fprintf(stderr,
                 "note: no --model given, serving the built-in default model '%s'. ITS WEIGHTS "
                 "ARE RANDOM: its text is noise. Pass --model PATH for real text.\n",
                 loaded.config.name.c_str());
  } else {
    auto from_file = LoadModelWithProgress(o.model_path, o.tokenizer_path);
    if (!from_file.ok()) return ReportError(from_file.status());
    loaded = std::move(from_file).value();
  }
  PrintModelSummary(loaded, SecondsSince(load_start));
  if (!loaded.vocab.has_value()) {
    return ReportError(InvalidArgumentError(
        "the model carries no tokenizer; pass one with --tokenizer PATH"));
  }
  auto tok = Tokenizer::Create(*loaded.vocab);
  if (!tok.ok()) return ReportError(tok.status().WithContext("tokenizer"));
  std::unique_ptr<Tokenizer> tokenizer = std::move(tok).value();
  const bool llama2c = loaded.format.rfind("llama2c", 0) == 0;

  // 2. Chat template: --chat-template, else the model's, else ChatML.
  auto chat_or = LoadServeChat(o.model_path, o.chat_template_path, *tokenizer);
  if (!chat_or.ok()) return ReportError(chat_or.status());
  std::shared_ptr<const ServeChat> chat = std::move(chat_or).value();
  if (chat->loaded.is_chatml_fallback) {
    std::fprintf(stderr,
                 "note: the model has no chat template; /v1/chat/completions uses ChatML.\n");
  }

  // The API name: the flag, else the --model path (as vLLM), else the built-in model's name
  // without its "(random weights)" note ("builtin-tiny").
  const std::string name = !o.served_model_name.empty() ? o.served_model_name
                           : o.model_path.empty() ? loaded.config.name.substr(0, loaded.config.name.find(' '))
                                                  : o.model_path;
  auto created = LlamaModel::Create(std::move(loaded));
  if (!created.ok()) return ReportError(created.status());
  std::unique_ptr<LlamaModel> model = std::move(created).value();
  PrintPackedWeights(model->packed_weights_bytes());

  // 3. KV cache.
  const int threads = o.threads > 0 ? o.threads : ThreadPool::HardwareThreads();
  ThreadPool pool(threads);
  auto kv_config = ResolveKvCacheFlags(o.kv);
  if (!kv_config.ok()) return ReportError(kv_config.status());
  KvCacheConfig kvc = *kv_config;
  if (o.gpu_memory_utilization >= 0.0) kvc.memory_utilization = o.gpu_memory_utilization;
  const int64_t max_model_len =
      kvc.max_model_len > 0 ? kvc.max_model_len : model->config().max_seq_len;
  auto scheduler = ResolveSchedulerConfig(o.scheduler, max_model_len);
  if (!scheduler.ok()) return ReportError(scheduler.status());
  kvc.default_num_sequences = std::min(scheduler->max_num_seqs, o.kv_default_sequences);
  kvc.max_num_batched_tokens = scheduler->max_num_batched_tokens;
  auto kv = CreateKvCacheWithBanner(*model, tokenizer.get(), kvc, &pool);
  if (!kv.ok()) return ReportError(kv.status());
  // Commit the KV pages now: the resident size is then stable from the first request on.
  const auto commit_start = std::chrono::steady_clock::now();
  kv->storage->CommitMemory();
  std::fprintf(stderr, "KV cache: %s committed in %.2f s\n",
               HumanBytes(kv->storage->total_bytes()).c_str(), SecondsSince(commit_start));

  // 4. Engine.
  EngineOptions eo;
  eo.enable_prefix_caching = o.scheduler.enable_prefix_caching;
  eo.tokenizer = tokenizer.get();
  eo.scheduler = *scheduler;
  eo.scheduler.max_model_len = kv->max_model_len;
  eo.scheduler.model_namespace = model->config().name;
  eo.scheduler.eos_token_ids =
      EndOfGenerationIds(*tokenizer, model->config().vocab_size, llama2c);
  auto engine = Engine::Create(eo, model.get(), &*kv, &pool);
  if (!engine.ok()) return ReportError(engine.status());

  // 5. HTTP server.
  ServerOptions so;
  so.host = o.host;
  so.port = o.port;
  so.api_key = o.api_key;
  so.served_model_name = name;
  so.max_queue_len = o.max_queue_len;
  so.shutdown_timeout_s = o.shutdown_timeout_s;
  so.kv.dtype = DTypeName(kv->spec.dtype);
  so.kv.block_size = kv->spec.block_size;
  so.kv.num_blocks = kv->num_blocks();
  so.kv.bytes_per_token = kv->spec.bytes_per_token();
  so.kv.num_layers = kv->spec.num_layers;
  so.kv.num_kv_heads = kv->spec.num_kv_heads;
  so.kv.scales = kv->storage->scales();
  so.render_chat = [chat](const openai::ChatRequest& req) -> StatusOr<std::string> {
    ChatTemplateInputs in;
    in.messages = req.messages;
    if (!req.tools.is_null()) in.tools = req.tools;
    in.add_generation_prompt = req.add_generation_prompt;
    in.bos_token = chat->loaded.bos_token;
    in.eos_token = chat->loaded.eos_token;
    if (req.chat_template_kwargs.is_object()) in.extra = req.chat_template_kwargs;
    const bool tools = !req.tools.is_null() && chat->tool_use.has_value();
    return (tools ? *chat->tool_use : *chat->main).Render(in);
  };
  OpenAiServer server(so, engine->get(), tokenizer.get());
  Status bound = server.Bind();
  if (!bound.ok()) return ReportError(bound);

  std::fprintf(stderr,
               "serve: model '%s'; max model len %lld tokens; --max-num-seqs %lld, "
               "--max-num-batched-tokens %lld, --max-queue-len %lld; prefix caching %s, chunked "
               "prefill %s; %d threads; API key %s; chat template: %s\n",
               name.c_str(), static_cast<long long>(kv->max_model_len),
               static_cast<long long>(eo.scheduler.max_num_seqs),
               static_cast<long long>(eo.scheduler.max_num_batched_tokens),
               static_cast<long long>(o.max_queue_len), eo.enable_prefix_caching ? "on" : "off",
               eo.scheduler.enable_chunked_prefill ? "on" : "off", threads,
               o.api_key.empty() ? "off" : "required", chat->description.c_str());
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
  const EngineStats st = (*engine)->stats();
  std::fprintf(stderr, "serve: stopped; %lld tokens generated, %lld preemptions\n",
               static_cast<long long>(st.num_generated_tokens_total),
               static_cast<long long>(st.num_preemptions_total));
  return 0;
}

}  // namespace

void AddServeCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Serve the model over an OpenAI-compatible HTTP API (/v1/completions, "
      "/v1/chat/completions, /v1/models), with /tokenize, /detokenize, /health and Prometheus "
      "/metrics. Without --model, serves a built-in model with RANDOM weights.");
  cmd->add_option("-m,--model", o->model_path,
                  "Model: GGUF file, llama2.c checkpoint (.bin) or Hugging Face folder");
  cmd->add_option("--tokenizer", o->tokenizer_path,
                  "Tokenizer file overriding the model's (tokenizer.json, llama2.c .bin, GGUF)");
  cmd->add_option("--served-model-name", o->served_model_name,
                  "The model name in the API (default: the --model path, or the built-in "
                  "model's name)");
  cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "Port to listen on (0: any free port)")->capture_default_str();
  cmd->add_option("--api-key", o->api_key,
                  "Require 'Authorization: Bearer KEY' on /v1 and /tokenize requests "
                  "(default: none)");
  AddKvCacheFlags(cmd, &o->kv);
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
  cmd->add_option("--shutdown-timeout", o->shutdown_timeout_s,
                  "On SIGTERM/SIGINT: seconds in-flight requests may take to finish before they "
                  "are aborted")
      ->capture_default_str();
  cmd->callback([o, exit_code]() { *exit_code = RunServe(*o); });
}

}  // namespace kvserve::cli

#include "cli/generate.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "model/synthetic.h"
#include "runtime/engine.h"
#include "runtime/engine_core.h"
#include "runtime/engine_policy.h"

namespace kvserve::cli {
namespace {

using Clock = std::chrono::steady_clock;

StatusOr<std::vector<TokenId>> ParseIdList(const std::string& text, int64_t vocab_size) {
  std::string s = text;
  std::replace(s.begin(), s.end(), ',', ' ');
  std::istringstream in(s);
  std::vector<TokenId> ids;
  std::string word;
  while (in >> word) {
    char* end = nullptr;
    const long long v = std::strtoll(word.c_str(), &end, 10);
    if (end == word.c_str() || *end != '\0' || v < 0 || v >= vocab_size) {
      return InvalidArgumentError("bad token id '" + word + "' in --prompt-ids (vocabulary has " +
                                  std::to_string(vocab_size) + " tokens)");
    }
    ids.push_back(static_cast<TokenId>(v));
  }
  return ids;
}

// Text of `output` as it continues `prompt` (SentencePiece decoding depends on what precedes a
// piece, e.g. the dummy-prefix space right after BOS).
std::string ContinuationText(const Tokenizer& tokenizer, const std::vector<TokenId>& prompt,
                             const std::vector<TokenId>& output) {
  std::vector<TokenId> all = prompt;
  all.insert(all.end(), output.begin(), output.end());
  const std::string full = tokenizer.Decode(all);
  const std::string head = tokenizer.Decode(prompt);
  if (full.compare(0, head.size(), head) == 0) return full.substr(head.size());
  return tokenizer.Decode(output);
}

// Prompts of a --prompts-file: one per line, empty lines skipped ("\r" of CRLF files removed).
StatusOr<std::vector<std::string>> ReadPromptsFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot open --prompts-file '" + path + "'");
  std::vector<std::string> prompts;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) prompts.push_back(line);
  }
  if (prompts.empty()) return InvalidArgumentError("--prompts-file '" + path + "' has no prompts");
  return prompts;
}

double Ms(EngineClock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// --prompts-file: every prompt through the engine at once.
int RunPromptsFile(const GenerateOptions& options, LlamaModel& model, const Tokenizer* tokenizer,
                   bool llama2c) {
  const bool json = options.output_format == "json";
  auto prompts = ReadPromptsFile(options.prompts_file);
  if (!prompts.ok()) return ReportError(prompts.status());
  if (tokenizer == nullptr) {
    return ReportError(InvalidArgumentError(
        "the model carries no tokenizer; pass one with --tokenizer PATH"));
  }
  const int64_t num_requests = static_cast<int64_t>(prompts->size());

  const int threads = options.threads > 0 ? options.threads : ThreadPool::HardwareThreads();
  ThreadPool pool(threads);
  auto kv_config = ResolveKvCacheFlags(options.kv);
  if (!kv_config.ok()) return ReportError(kv_config.status());
  KvCacheConfig kvc = *kv_config;
  const int64_t max_model_len =
      kvc.max_model_len > 0 ? kvc.max_model_len : model.config().max_seq_len;
  auto scheduler = ResolveSchedulerConfig(options.scheduler, max_model_len);
  if (!scheduler.ok()) return ReportError(scheduler.status());
  // One-shot sizing: room for the sequences that can run at once (unless a budget flag says).
  kvc.default_num_sequences = std::min(num_requests, scheduler->max_num_seqs);
  kvc.max_num_batched_tokens = scheduler->max_num_batched_tokens;
  auto kv = CreateKvCacheWithBanner(model, tokenizer, kvc, &pool);
  if (!kv.ok()) return ReportError(kv.status());

  EngineOptions eo;
  eo.enable_prefix_caching = options.scheduler.enable_prefix_caching;
  eo.tokenizer = tokenizer;
  eo.scheduler = *scheduler;
  eo.scheduler.max_model_len = kv->max_model_len;
  eo.scheduler.model_namespace = model.config().name;
  eo.scheduler.eos_token_ids =
      EndOfGenerationIds(*tokenizer, model.config().vocab_size, llama2c);
  auto engine = Engine::Create(eo, &model, &*kv, &pool);
  if (!engine.ok()) return ReportError(engine.status());

  std::vector<std::vector<TokenId>> prompt_ids;
  EncodeOptions encode;
  encode.add_bos = !options.no_bos;
  for (const std::string& p : *prompts) prompt_ids.push_back(tokenizer->Encode(p, encode));

  // Commit the KV pages this run can touch before the clock starts, as serve commits its whole
  // cache at start-up: at most every request's prompt + output, in the lowest block ids (the
  // pool hands those out first). First-touch page faults are then not part of the timings.
  const int64_t max_tokens = std::max<int64_t>(1, options.max_new_tokens);
  int64_t run_blocks = 0;
  for (const std::vector<TokenId>& ids : prompt_ids) {
    run_blocks += kv->spec.blocks_for_tokens(static_cast<int64_t>(ids.size()) + max_tokens);
  }
  run_blocks = std::min(run_blocks, kv->num_blocks());
  const auto commit_start = std::chrono::steady_clock::now();
  kv->storage->CommitMemory(run_blocks);
  std::fprintf(stderr, "KV cache: %s of %lld blocks committed in %.2f s\n",
               HumanBytes(run_blocks * kv->spec.bytes_per_block()).c_str(),
               static_cast<long long>(run_blocks), SecondsSince(commit_start));

  const auto start = EngineClock::now();
  std::vector<std::unique_ptr<RequestStream>> streams;
  for (int64_t i = 0; i < num_requests; ++i) {
    RequestInput in;
    in.prompt_ids = prompt_ids[i];
    in.sampling = options.sampling;
    in.sampling.seed = options.sampling.seed + static_cast<uint64_t>(i);
    in.max_tokens = max_tokens;
    in.ignore_eos = options.ignore_eos;
    auto stream = (*engine)->submit(std::move(in));
    if (!stream.ok()) {
      return ReportError(stream.status().WithContext("prompt on line " + std::to_string(i + 1) +
                                                     " of --prompts-file"));
    }
    streams.push_back(std::move(stream).value());
  }

  struct Result {
    std::vector<TokenId> ids;
    FinishReason finish = FinishReason::kNone;
    std::string error;
    int64_t cached_tokens = 0;
    double ttft_ms = 0, tpot_ms = 0;
  };
  std::vector<Result> results(static_cast<size_t>(num_requests));
  EngineClock::time_point last = start;
  for (int64_t i = 0; i < num_requests; ++i) {
    Result& r = results[i];
    RequestStream& s = *streams[i];
    StreamEvent ev;
    EngineClock::time_point first_token, last_token;
    while (s.Next(&ev)) {
      if (!ev.token_ids.empty()) {
        if (r.ids.empty()) first_token = ev.time;
        last_token = ev.time;
        r.ids.insert(r.ids.end(), ev.token_ids.begin(), ev.token_ids.end());
      }
      r.cached_tokens = std::max(r.cached_tokens, ev.num_cached_prompt_tokens);
      if (ev.finished()) {
        r.finish = ev.finish_reason;
        r.error = ev.error;
        last = std::max(last, ev.time);
      }
    }
    if (!r.ids.empty()) {
      r.ttft_ms = Ms(first_token - s.submit_time());
      if (r.ids.size() > 1) r.tpot_ms = Ms(last_token - first_token) / (r.ids.size() - 1);
    }
  }
  const double elapsed_s = std::chrono::duration<double>(last - start).count();
  const EngineStats stats = (*engine)->wait_until_idle();

  int64_t total_prompt = 0, total_output = 0, num_ttft = 0, num_tpot = 0;
  double sum_ttft = 0, sum_tpot = 0;
  int num_errors = 0;
  for (int64_t i = 0; i < num_requests; ++i) {
    const Result& r = results[i];
    total_prompt += static_cast<int64_t>(prompt_ids[i].size());
    total_output += static_cast<int64_t>(r.ids.size());
    if (!r.ids.empty()) {
      sum_ttft += r.ttft_ms;
      ++num_ttft;
    }
    if (r.ids.size() > 1) {
      sum_tpot += r.tpot_ms;
      ++num_tpot;
    }
    if (r.finish == FinishReason::kError || r.finish == FinishReason::kAbort) ++num_errors;
    std::vector<TokenId> text_ids = r.ids;
    if (r.finish == FinishReason::kStop && !text_ids.empty()) text_ids.pop_back();
    const std::string text = ContinuationText(*tokenizer, prompt_ids[i], text_ids);
    if (json) {
      nlohmann::json out;
      out["index"] = i;
      out["prompt"] = (*prompts)[i];
      out["prompt_token_ids"] = prompt_ids[i];
      out["output_token_ids"] = r.ids;
      out["text"] = text;
      out["finish_reason"] = FinishReasonName(r.finish);
      if (!r.error.empty()) out["error"] = r.error;
      out["num_prompt_tokens"] = prompt_ids[i].size();
      out["num_output_tokens"] = r.ids.size();
      out["cached_tokens"] = r.cached_tokens;
      out["ttft_ms"] = r.ttft_ms;
      out["tpot_ms"] = r.tpot_ms;
      std::printf("%s\n",
                  out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf("%s%s\n", (*prompts)[i].c_str(), text.c_str());
      if (!r.error.empty()) std::fprintf(stderr, "prompt %lld: error: %s\n",
                                         static_cast<long long>(i + 1), r.error.c_str());
      if (i + 1 < num_requests) std::printf("\n");
    }
  }
  const double tps = elapsed_s > 0 ? total_output / elapsed_s : 0.0;
  const double mean_ttft = num_ttft > 0 ? sum_ttft / num_ttft : 0.0;
  const double mean_tpot = num_tpot > 0 ? sum_tpot / num_tpot : 0.0;
  const double hit_rate = stats.prefix_queries_tokens > 0
                              ? static_cast<double>(stats.prefix_hits_tokens) /
                                    stats.prefix_queries_tokens
                              : 0.0;
  if (json) {
    nlohmann::json summary;
    summary["num_requests"] = num_requests;
    summary["total_prompt_tokens"] = total_prompt;
    summary["total_output_tokens"] = total_output;
    summary["elapsed_s"] = elapsed_s;
    summary["output_tokens_per_s"] = tps;
    summary["mean_ttft_ms"] = mean_ttft;
    summary["mean_tpot_ms"] = mean_tpot;
    summary["prefix_cache_hit_rate"] = hit_rate;
    summary["num_preemptions"] = stats.num_preemptions_total;
    summary["num_steps"] = stats.num_steps;
    summary["threads"] = threads;
    std::printf("%s\n", summary.dump().c_str());
  } else {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "%lld requests: %lld prompt tokens, %lld output tokens in %.3f s "
                 "(%.1f output tok/s); mean TTFT %.1f ms, mean TPOT %.2f ms; prefix cache hit "
                 "rate %.1f%%; %lld steps, %lld preemptions; %d threads\n",
                 static_cast<long long>(num_requests), static_cast<long long>(total_prompt),
                 static_cast<long long>(total_output), elapsed_s, tps, mean_ttft, mean_tpot,
                 100.0 * hit_rate, static_cast<long long>(stats.num_steps),
                 static_cast<long long>(stats.num_preemptions_total), threads);
  }
  std::fflush(stdout);
  return num_errors > 0 ? 1 : 0;
}

}  // namespace

int RunGenerateCommand(const GenerateOptions& options) {
  if (Status s = options.sampling.Validate(); !s.ok()) return ReportError(s);
  if (options.max_new_tokens < 0) {
    return ReportError(InvalidArgumentError("-n must be >= 0"));
  }
  if (options.threads < 0) return ReportError(InvalidArgumentError("--threads must be >= 1"));
  if (options.output_format != "text" && options.output_format != "json") {
    return ReportError(InvalidArgumentError("--output-format must be text or json"));
  }
  const bool json = options.output_format == "json";
  if (!options.prompts_file.empty() &&
      (!options.prompt.empty() || !options.prompt_ids.empty() ||
       options.random_prompt_tokens > 0)) {
    return ReportError(
        InvalidArgumentError("--prompts-file cannot be combined with -p/--prompt"));
  }

  // 1. The model.
  auto load_start = Clock::now();
  LoadedModel loaded;
  if (options.model_path.empty()) {
    loaded = MakeBuiltinDefaultModel();
    std::fprintf(stderr,
                 "note: no --model given, using the built-in default model '%s'.\n"
                 "note: ITS WEIGHTS ARE RANDOM: the text it generates is noise. Pass --model PATH "
                 "(GGUF file, llama2.c checkpoint or Hugging Face folder) for real text.\n",
                 loaded.config.name.c_str());
  } else {
    auto from_file = LoadModelWithProgress(options.model_path, options.tokenizer_path);
    if (!from_file.ok()) return ReportError(from_file.status());
    loaded = std::move(from_file).value();
  }
  const double load_seconds = SecondsSince(load_start);
  PrintModelSummary(loaded, load_seconds);
  const std::string model_name = options.model_path.empty() ? loaded.config.name
                                                             : options.model_path;
  const bool llama2c = loaded.format.rfind("llama2c", 0) == 0;
  const int64_t num_parameters = loaded.config.NumParameters();
  const int64_t weight_bytes = loaded.WeightBytes();
  const int64_t weight_bytes_per_token = WeightBytesPerToken(loaded);
  const int64_t parameters_per_token = ParametersPerToken(loaded);
  const int64_t output_parameters = OutputParameters(loaded);
  const std::string weight_type = loaded.WeightTypeSummary();

  std::unique_ptr<Tokenizer> tokenizer;
  if (loaded.vocab.has_value()) {
    auto tok = Tokenizer::Create(*loaded.vocab);
    if (!tok.ok()) return ReportError(tok.status().WithContext("tokenizer"));
    tokenizer = std::move(tok).value();
  }

  auto created = LlamaModel::Create(std::move(loaded));
  if (!created.ok()) return ReportError(created.status());
  std::unique_ptr<LlamaModel> model = std::move(created).value();
  PrintPackedWeights(model->packed_weights_bytes());
  const int64_t vocab_size = model->config().vocab_size;
  if (!options.prompts_file.empty()) {
    return RunPromptsFile(options, *model, tokenizer.get(), llama2c);
  }

  // 2. The prompt.
  std::vector<TokenId> prompt_ids;
  if (!options.prompt_ids.empty()) {
    auto ids = ParseIdList(options.prompt_ids, vocab_size);
    if (!ids.ok()) return ReportError(ids.status());
    prompt_ids = std::move(ids).value();
  } else if (options.random_prompt_tokens > 0) {
    prompt_ids = SyntheticTokenIds(options.random_prompt_tokens, vocab_size);
  } else {
    if (tokenizer == nullptr) {
      return ReportError(InvalidArgumentError(
          "the model carries no tokenizer; pass one with --tokenizer PATH"));
    }
    EncodeOptions encode;
    encode.add_bos = !options.no_bos;
    prompt_ids = tokenizer->Encode(options.prompt, encode);
  }

  // 3. The paged KV cache (fp8 scales may need a calibration pass: threads first) and the
  // engine core on it: one sequence, its whole prompt in one forward pass unless
  // --max-num-batched-tokens says otherwise.
  const int threads = options.threads > 0 ? options.threads : ThreadPool::HardwareThreads();
  ThreadPool pool(threads);
  auto kv_config = ResolveKvCacheFlags(options.kv);
  if (!kv_config.ok()) return ReportError(kv_config.status());
  KvCacheConfig kvc = *kv_config;
  const int64_t max_model_len =
      kvc.max_model_len > 0 ? kvc.max_model_len : model->config().max_seq_len;
  SchedulerFlags flags = options.scheduler;
  flags.max_num_seqs = 1;
  if (flags.max_num_batched_tokens == 0) flags.max_num_batched_tokens = max_model_len;
  auto scheduler = ResolveSchedulerConfig(flags, max_model_len);
  if (!scheduler.ok()) return ReportError(scheduler.status());
  kvc.max_num_batched_tokens = scheduler->max_num_batched_tokens;
  auto kv = CreateKvCacheWithBanner(*model, tokenizer.get(), kvc, &pool);
  if (!kv.ok()) return ReportError(kv.status());
  EngineCoreOptions co;
  co.enable_prefix_caching = flags.enable_prefix_caching;
  co.scheduler = *scheduler;
  co.scheduler.max_model_len = kv->max_model_len;
  co.scheduler.model_namespace = model->config().name;
  if (tokenizer != nullptr) {
    co.scheduler.eos_token_ids = EndOfGenerationIds(*tokenizer, vocab_size, llama2c);
  }
  auto core = EngineCore::Create(co, model.get(), &*kv, &pool);
  if (!core.ok()) return ReportError(core.status());

  RequestInput input;
  input.prompt_ids = prompt_ids;
  input.sampling = options.sampling;
  input.max_tokens = options.max_new_tokens;
  input.ignore_eos = options.ignore_eos;
  // Checked before the prompt is echoed, so a bad prompt prints only the error (-n 0 runs
  // nothing: checked as if it asked for one token).
  RequestInput check = input;
  check.max_tokens = std::max<int64_t>(1, check.max_tokens);
  if (Status s = (*core)->ValidateInput(check); !s.ok()) return ReportError(s);

  // 4. Generate, streaming text in text mode.
  std::unique_ptr<IncrementalDetokenizer> detok;
  if (!json && tokenizer != nullptr) {
    detok = std::make_unique<IncrementalDetokenizer>(tokenizer.get());
    for (TokenId t : prompt_ids) std::fputs(detok->Push(t).c_str(), stdout);
    std::fflush(stdout);
  }
  std::vector<TokenId> output_ids;
  RequestOutput final_output;
  final_output.finish_reason = FinishReason::kLength;
  double prefill_seconds = 0.0, decode_seconds = 0.0;
  int64_t num_decode_steps = 0;
  if (input.max_tokens > 0) {
    if (Status s = (*core)->add_request(/*id=*/1, std::move(input)); !s.ok()) {
      return ReportError(s);
    }
    auto start = Clock::now();
    bool finished = false, prefilled = false;
    while (!finished) {
      const EngineCoreStep step = (*core)->step();
      for (const RequestOutput& out : step.outputs) {
        for (TokenId t : out.new_token_ids) {
          output_ids.push_back(t);
          if (json) continue;
          if (detok == nullptr) {
            std::printf("%d ", t);
          } else if (!(out.finished() && t == out.stop_token_id)) {
            std::fputs(detok->Push(t).c_str(), stdout);
          }
          std::fflush(stdout);
        }
        if (out.finished()) {
          finished = true;
          final_output = out;
        }
      }
      // The first token ends the prefill (the prompt's forward passes and the first sample);
      // every later step is one decode.
      if (output_ids.empty() && !finished) continue;
      if (!prefilled) {
        prefilled = true;
        prefill_seconds = SecondsSince(start);
        start = Clock::now();
      } else {
        ++num_decode_steps;
      }
    }
    decode_seconds = SecondsSince(start);
  }
  if (final_output.finish_reason == FinishReason::kError) {
    if (!json) std::fputs("\n", stdout);
    return ReportError(InternalError(final_output.error));
  }
  const std::string finish_reason = FinishReasonName(final_output.finish_reason);
  const int64_t num_prompt = static_cast<int64_t>(prompt_ids.size());
  const int64_t num_output = static_cast<int64_t>(output_ids.size());
  const double prefill_tps =
      prefill_seconds > 0 ? static_cast<double>(num_prompt) / prefill_seconds : 0.0;
  const double decode_tps =
      decode_seconds > 0 ? static_cast<double>(num_decode_steps) / decode_seconds : 0.0;

  if (json) {
    std::vector<TokenId> text_ids = output_ids;
    if (final_output.finish_reason == FinishReason::kStop && !text_ids.empty()) {
      text_ids.pop_back();
    }
    nlohmann::json out;
    out["model"] = model_name;
    out["prompt_token_ids"] = prompt_ids;
    out["output_token_ids"] = output_ids;
    out["text"] = tokenizer ? ContinuationText(*tokenizer, prompt_ids, text_ids) : "";
    out["finish_reason"] = finish_reason;
    out["num_prompt_tokens"] = num_prompt;
    out["num_output_tokens"] = num_output;
    out["prefill_seconds"] = prefill_seconds;
    out["decode_seconds"] = decode_seconds;
    out["num_decode_steps"] = num_decode_steps;
    out["prefill_tokens_per_s"] = prefill_tps;
    out["decode_tokens_per_s"] = decode_tps;
    out["threads"] = threads;
    out["load_seconds"] = load_seconds;
    out["num_parameters"] = num_parameters;
    out["parameters_per_token"] = parameters_per_token;
    out["output_parameters"] = output_parameters;
    out["weight_type"] = weight_type;
    out["weight_bytes"] = weight_bytes;
    out["weight_bytes_per_token"] = weight_bytes_per_token;
    // The sequence just before its blocks returned.
    const KvMemoryStats ks = (*core)->finished_sequence_memory_stats(final_output);
    out["kv_cache"] = {
        {"dtype", DTypeName(kv->spec.dtype)},
        {"block_size", kv->spec.block_size},
        {"bytes_per_token", kv->spec.bytes_per_token()},
        {"capacity_tokens", kv->capacity_tokens()},
        {"num_blocks", kv->num_blocks()},
        {"blocks_in_use", ks.num_blocks_in_use},
        {"tokens_stored", ks.num_tokens_stored},
        {"bytes_reserved", ks.bytes_reserved},
        {"bytes_holding_tokens", ks.bytes_holding_tokens},
        {"fragmentation_perc", ks.fragmentation_perc},
        {"scales_source", KvScaleSourceName(kv->storage->scales().source)},
        {"clipped_values", kv->storage->quant_stats().total_clipped()},
    };
    // Invalid UTF-8 in a token's text must not abort the dump.
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    if (detok != nullptr) std::fputs(detok->Flush().c_str(), stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    std::fprintf(stderr,
                 "prefill: %lld tokens in %.3f s (%.1f tok/s); decode: %lld tokens in %.3f s "
                 "(%.1f tok/s); %d threads; finish: %s\n",
                 static_cast<long long>(num_prompt), prefill_seconds, prefill_tps,
                 static_cast<long long>(num_decode_steps), decode_seconds, decode_tps, threads,
                 finish_reason.c_str());
  }
  return 0;
}

}  // namespace kvserve::cli

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
#include "cli/model_setup.h"
#include "model/synthetic.h"
#include "grammar/grammar_cache.h"
#include "runtime/batch_generate.h"
#include "runtime/engine.h"
#include "runtime/engine_core.h"
#include "runtime/engine_policy.h"
#include "runtime/structured_decoding.h"

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

// --grammar-file / --json-schema / --regex: the compiled grammar (null: none given).
StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> GrammarFromFlags(
    const GenerateOptions& o) {
  const int given = !o.grammar_file.empty() + !o.json_schema.empty() + !o.regex.empty();
  if (given == 0) return std::shared_ptr<const grammar::CompiledGrammar>();
  if (given > 1) {
    return InvalidArgumentError("give one of --grammar-file, --json-schema and --regex");
  }
  auto read = [](const std::string& path, const char* flag) -> StatusOr<std::string> {
    std::ifstream in(path);
    if (!in) return NotFoundError(std::string("cannot open ") + flag + " '" + path + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  grammar::GrammarSpec spec;
  if (!o.grammar_file.empty()) {
    spec.kind = grammar::GrammarKind::kGbnf;
    KV_ASSIGN_OR_RETURN(spec.text, read(o.grammar_file, "--grammar-file"));
  } else if (!o.json_schema.empty()) {
    spec.kind = grammar::GrammarKind::kJsonSchema;
    spec.text = o.json_schema;
    if (spec.text[0] == '@') {
      KV_ASSIGN_OR_RETURN(spec.text, read(spec.text.substr(1), "--json-schema"));
    }
  } else {
    spec.kind = grammar::GrammarKind::kRegex;
    spec.text = o.regex;
  }
  return grammar::CompileGrammar(spec);
}

// --prompts-file: every prompt through the engine at once.
int RunPromptsFile(const GenerateOptions& options, const KvEvictionPolicy& policy,
                   const std::shared_ptr<const grammar::CompiledGrammar>& grammar,
                   LlamaModel& model, const Tokenizer& tokenizer) {
  const bool json = options.output_format == "json";
  auto prompts = ReadPromptsFile(options.prompts_file);
  if (!prompts.ok()) return ReportError(prompts.status());
  const int64_t num_requests = static_cast<int64_t>(prompts->size());

  const int threads = options.threads > 0 ? options.threads : ThreadPool::HardwareThreads();
  ThreadPool pool(threads);
  auto kv_config = ResolveKvCacheFlags(options.kv);
  if (!kv_config.ok()) return ReportError(kv_config.status());
  EngineConfigOptions eco;
  eco.kv = *kv_config;
  eco.scheduler = options.scheduler;
  // One-shot sizing: room for the sequences that can run at once (unless a budget flag says).
  eco.default_num_sequences = num_requests;
  auto config = ResolveEngineConfig(eco, model, &tokenizer);
  if (!config.ok()) return ReportError(config.status());
  auto kv = CreateKvCacheWithBanner(model, &tokenizer, config->kv, &pool);
  if (!kv.ok()) return ReportError(kv.status());
  EngineOptions eo;
  static_cast<EngineCoreOptions&>(eo) = config->core;
  eo.tokenizer = &tokenizer;
  auto engine = Engine::Create(eo, &model, &*kv, &pool);
  if (!engine.ok()) return ReportError(engine.status());

  EncodeOptions encode;
  encode.add_bos = !options.no_bos;
  std::vector<RequestInput> inputs;
  for (int64_t i = 0; i < num_requests; ++i) {
    RequestInput in;
    in.prompt_ids = tokenizer.Encode((*prompts)[i], encode);
    in.sampling = options.sampling;
    in.sampling.seed = options.sampling.seed + static_cast<uint64_t>(i);
    in.max_tokens = std::max<int64_t>(1, options.max_new_tokens);
    in.ignore_eos = options.ignore_eos;
    in.kv_policy = policy;
    in.grammar = grammar;
    inputs.push_back(std::move(in));
  }

  // Commit the KV pages this run can touch before the clock starts, as serve commits its whole
  // cache at start-up (in the lowest block ids: the pool hands those out first). First-touch
  // page faults are then not part of the timings.
  const int64_t run_blocks = BatchKvBlocks(*kv, inputs);
  const auto commit_start = std::chrono::steady_clock::now();
  kv->storage->CommitMemory(run_blocks);
  std::fprintf(stderr, "KV cache: %s of %lld blocks committed in %.2f s\n",
               HumanBytes(run_blocks * kv->spec.bytes_per_block()).c_str(),
               static_cast<long long>(run_blocks), SecondsSince(commit_start));

  std::vector<std::vector<TokenId>> prompt_ids;
  for (int64_t i = 0; i < num_requests; ++i) {
    if (Status s = (*engine)->validate(inputs[i]); !s.ok()) {
      return ReportError(
          s.WithContext("prompt on line " + std::to_string(i + 1) + " of --prompts-file"));
    }
    prompt_ids.push_back(inputs[i].prompt_ids);
  }
  auto batch = GenerateBatch(**engine, std::move(inputs));
  if (!batch.ok()) return ReportError(batch.status());
  for (int64_t i = 0; i < num_requests; ++i) {
    const BatchOutput& r = batch->outputs[i];
    std::vector<TokenId> text_ids = r.token_ids;
    if (r.finish_reason == FinishReason::kStop && !text_ids.empty()) text_ids.pop_back();
    const std::string text = ContinuationText(tokenizer, prompt_ids[i], text_ids);
    if (json) {
      nlohmann::json out;
      out["index"] = i;
      out["prompt"] = (*prompts)[i];
      out["prompt_token_ids"] = prompt_ids[i];
      out["output_token_ids"] = r.token_ids;
      out["text"] = text;
      out["finish_reason"] = FinishReasonName(r.finish_reason);
      if (!r.error.empty()) out["error"] = r.error;
      out["num_prompt_tokens"] = prompt_ids[i].size();
      out["num_output_tokens"] = r.token_ids.size();
      out["cached_tokens"] = r.num_cached_prompt_tokens;
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
  const BatchSummary& sum = batch->summary;
  if (json) {
    nlohmann::json summary;
    summary["num_requests"] = sum.num_requests;
    summary["total_prompt_tokens"] = sum.total_prompt_tokens;
    summary["total_output_tokens"] = sum.total_output_tokens;
    summary["elapsed_s"] = sum.elapsed_s;
    summary["output_tokens_per_s"] = sum.output_tokens_per_s;
    summary["mean_ttft_ms"] = sum.mean_ttft_ms;
    summary["mean_tpot_ms"] = sum.mean_tpot_ms;
    summary["prefix_cache_hit_rate"] = sum.prefix_cache_hit_rate;
    summary["num_preemptions"] = sum.num_preemptions;
    summary["max_num_running"] = sum.max_num_running;
    summary["num_steps"] = sum.num_steps;
    summary["threads"] = threads;
    std::printf("%s\n", summary.dump().c_str());
  } else {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "%lld requests: %lld prompt tokens, %lld output tokens in %.3f s "
                 "(%.1f output tok/s); mean TTFT %.1f ms, mean TPOT %.2f ms; prefix cache hit "
                 "rate %.1f%%; %lld steps, %lld preemptions, at most %lld running at once; "
                 "%d threads\n",
                 static_cast<long long>(sum.num_requests),
                 static_cast<long long>(sum.total_prompt_tokens),
                 static_cast<long long>(sum.total_output_tokens), sum.elapsed_s,
                 sum.output_tokens_per_s, sum.mean_ttft_ms, sum.mean_tpot_ms,
                 100.0 * sum.prefix_cache_hit_rate, static_cast<long long>(sum.num_steps),
                 static_cast<long long>(sum.num_preemptions),
                 static_cast<long long>(sum.max_num_running), threads);
  }
  std::fflush(stdout);
  return batch->summary.num_failed > 0 ? 1 : 0;
}

}  // namespace

int RunGenerateCommand(const GenerateOptions& options) {
  if (Status s = options.sampling.Validate(); !s.ok()) return ReportError(s);
  if (options.max_new_tokens < 0) {
    return ReportError(InvalidArgumentError("-n must be >= 0"));
  }
  if (options.threads < 0) return ReportError(InvalidArgumentError("--threads must be >= 1"));
  const StatusOr<KvEvictionPolicy> policy = ResolveKvEvictionFlags(options.eviction);
  if (!policy.ok()) return ReportError(policy.status());
  if (policy->method != KvEvictionMethod::kNone) {
    std::fprintf(stderr, "kv eviction: %s\n", policy->ToString().c_str());
  }
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
  if (!options.prompts_file.empty() && options.warmup_runs > 0) {
    return ReportError(InvalidArgumentError("--warmup applies to a single prompt, not --prompts-file"));
  }

  // 1. The model.
  const auto grammar = GrammarFromFlags(options);
  if (!grammar.ok()) return ReportError(grammar.status());
  CommandModelOptions mo;
  mo.model_path = options.model_path;
  mo.tokenizer_path = options.tokenizer_path;
  mo.require_tokenizer = !options.prompts_file.empty() || *grammar != nullptr;
  mo.model.mla_expanded_kv = options.mla_attention == "expanded";
  auto loaded_or = LoadCommandModel(mo);
  if (!loaded_or.ok()) return ReportError(loaded_or.status());
  CommandModel& cm = *loaded_or;
  LlamaModel* model = cm.model.get();
  const Tokenizer* tokenizer = cm.tokenizer.get();
  const int64_t vocab_size = model->config().vocab_size;
  if (!options.prompts_file.empty()) {
    return RunPromptsFile(options, *policy, *grammar, *model, *tokenizer);
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
    if (tokenizer == nullptr) return ReportError(NoTokenizerError());
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
  EngineConfigOptions eco;
  eco.kv = *kv_config;
  eco.scheduler = options.scheduler;
  // One sequence: --max-num-seqs does not apply, but a bad value is still refused.
  if (eco.scheduler.max_num_seqs >= 1) eco.scheduler.max_num_seqs = 1;
  eco.prompt_in_one_pass = true;
  auto config = ResolveEngineConfig(eco, *model, tokenizer);
  if (!config.ok()) return ReportError(config.status());
  auto kv = CreateKvCacheWithBanner(*model, tokenizer, config->kv, &pool);
  if (!kv.ok()) return ReportError(kv.status());
  if (*grammar != nullptr) {
    config->core.grammar_vocabulary = grammar::TokenTrie::Build(
        GrammarVocabulary(*tokenizer, config->core.scheduler.eos_token_ids));
  }
  RequestInput input;
  input.grammar = *grammar;
  input.prompt_ids = prompt_ids;
  input.sampling = options.sampling;
  input.max_tokens = options.max_new_tokens;
  input.ignore_eos = options.ignore_eos;
  input.kv_policy = *policy;
  // Checked before the prompt is echoed, so a bad prompt prints only the error (-n 0 runs
  // nothing: checked as if it asked for one token).
  RequestInput check = input;
  check.max_tokens = std::max<int64_t>(1, check.max_tokens);
  // The KV pages this run can touch, committed before the clock starts, as --prompts-file
  // does (on these VMs a fresh 2 MiB page costs a host fault on first write: a 512-token
  // prefill of smollm2-135m touches 60 of them, docs/benchmarks.md, "Ninth run").
  if (input.max_tokens > 0) {
    const int64_t run_blocks = BatchKvBlocks(*kv, {input});
    const auto commit_start = std::chrono::steady_clock::now();
    kv->storage->CommitMemory(run_blocks);
    std::fprintf(stderr, "KV cache: %s of %lld blocks committed in %.2f s\n",
                 HumanBytes(run_blocks * kv->spec.bytes_per_block()).c_str(),
                 static_cast<long long>(run_blocks), SecondsSince(commit_start));
  }
  // --warmup: the same prompt and two tokens on an engine core of its own, untimed and then
  // dropped (its prefix cache with it), over the same KV pages, model workspaces and threads,
  // as llama-bench times its runs after a warm-up run.
  for (int w = 0; w < options.warmup_runs && input.max_tokens > 0; ++w) {
    auto warm = EngineCore::Create(config->core, model, &*kv, &pool);
    if (!warm.ok()) return ReportError(warm.status());
    if (Status s = (*warm)->ValidateInput(check); !s.ok()) return ReportError(s);
    RequestInput warm_input = input;
    warm_input.max_tokens = std::min<int64_t>(2, input.max_tokens);
    if (Status s = (*warm)->add_request(/*id=*/1, std::move(warm_input)); !s.ok()) {
      return ReportError(s);
    }
    for (bool done = false; !done;) {
      for (const RequestOutput& out : (*warm)->step().outputs) done = done || out.finished();
    }
  }
  auto core = EngineCore::Create(config->core, model, &*kv, &pool);
  if (!core.ok()) return ReportError(core.status());
  if (Status s = (*core)->ValidateInput(check); !s.ok()) return ReportError(s);

  // 4. Generate, streaming text in text mode.
  std::unique_ptr<IncrementalDetokenizer> detok;
  if (!json && tokenizer != nullptr) {
    detok = std::make_unique<IncrementalDetokenizer>(tokenizer);
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
    const LoadedModel& loaded = model->loaded();
    out["model"] = options.model_path.empty() ? loaded.config.name : options.model_path;
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
    if (*grammar != nullptr) {
      // Structured output: the engine-thread time its masks took, of the whole run.
      out["grammar_tokens"] = (*core)->num_grammar_tokens_total();
      out["grammar_seconds"] = (*core)->grammar_seconds_total();
    }
    out["threads"] = threads;
    out["load_seconds"] = cm.load_seconds;
    out["num_parameters"] = loaded.config.NumParameters();
    out["parameters_per_token"] = ParametersPerToken(loaded);
    out["output_parameters"] = OutputParameters(loaded);
    out["weight_type"] = loaded.WeightTypeSummary();
    out["weight_bytes"] = loaded.WeightBytes();
    {
      nlohmann::json by_type = nlohmann::json::object();
      for (const auto& [dtype, bytes] : TallyWeightBytes(loaded.tensors).by_type) {
        by_type[DTypeName(dtype)] = bytes;
      }
      out["weight_bytes_by_type"] = by_type;
    }
    out["weight_bytes_per_token"] = WeightBytesPerToken(loaded);
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

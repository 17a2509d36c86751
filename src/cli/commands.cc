#include "cli/commands.h"

#include <cstdio>
#include <exception>
#include <memory>
#include <random>
#include <string>

#include "cli/generate.h"
#include "cli/plan.h"
#include "cli/scheduler_flags.h"

namespace kvserve::cli {

void AddGenerateCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<GenerateOptions>();
  auto seed = std::make_shared<int64_t>(-1);
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "Generate text from a prompt: prefill in one batch, then decode token by token.\n"
      "Without --model, a built-in model with RANDOM weights is used (its text is noise).");
  cmd->add_option("-m,--model", opts->model_path,
                  "Model: GGUF file, llama2.c checkpoint (.bin) or Hugging Face folder");
  cmd->add_option("--tokenizer", opts->tokenizer_path,
                  "Tokenizer file overriding the model's (tokenizer.json, llama2.c .bin, GGUF)");
  cmd->add_option("--mla-attention", opts->mla_attention,
                  "MLA (DeepSeek) models: absorbed attends over the latent cache; expanded caches "
                  "every head's key and value instead (for measuring what absorption saves)")
      ->check(CLI::IsMember({"absorbed", "expanded"}))
      ->capture_default_str();
  cmd->add_option("-p,--prompt", opts->prompt, "Prompt text");
  cmd->add_option("-n,--max-tokens", opts->max_new_tokens, "Maximum number of tokens to generate")
      ->capture_default_str();
  cmd->add_option("--temperature", opts->sampling.temperature, "Sampling temperature; 0 = greedy")
      ->capture_default_str();
  cmd->add_option("--top-k", opts->sampling.top_k, "Keep the K most likely tokens; 0 = off")
      ->capture_default_str();
  cmd->add_option("--top-p", opts->sampling.top_p, "Nucleus sampling mass; 1 = off")
      ->capture_default_str();
  cmd->add_option("--min-p", opts->sampling.min_p,
                  "Drop tokens below P times the top token's probability; 0 = off")
      ->capture_default_str();
  cmd->add_option("--repetition-penalty", opts->sampling.repetition_penalty,
                  "Penalty for tokens in prompt or output (> 1 discourages); 1 = off")
      ->capture_default_str();
  cmd->add_option("--presence-penalty", opts->sampling.presence_penalty,
                  "Subtracted once from logits of tokens already generated [-2, 2]")
      ->capture_default_str();
  cmd->add_option("--frequency-penalty", opts->sampling.frequency_penalty,
                  "Subtracted per occurrence from logits of generated tokens [-2, 2]")
      ->capture_default_str();
  cmd->add_option("--seed", *seed, "Random seed (default: a random one); same seed, same text");
  cmd->add_option("-t,--threads", opts->threads, "Worker threads (default: all available)");
  cmd->add_option("--output-format", opts->output_format,
                  "text: stream the text; json: one JSON object with ids, text and timings")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_flag("--no-bos", opts->no_bos, "Do not add the BOS token to the prompt");
  cmd->add_option("--prompts-file", opts->prompts_file,
                  "Run every line of this file as a prompt, all together through the engine "
                  "(continuous batching, under the Scheduler flags); report throughput, TTFT "
                  "and TPOT. json: one object per prompt in file order, then a summary object");
  cmd->add_option("--grammar-file", opts->grammar_file,
                  "Constrain the output to a GBNF grammar (llama.cpp's format) in this file");
  cmd->add_option("-j,--json-schema", opts->json_schema,
                  "Constrain the output to JSON valid under this JSON Schema (its text, or @FILE)");
  cmd->add_option("--regex", opts->regex, "Constrain the output to match this regular expression");
  AddSchedulerFlags(cmd, &opts->scheduler);  // used with --prompts-file
  AddKvCacheFlags(cmd, &opts->kv);
  AddKvEvictionFlags(cmd, &opts->eviction);
  // Hidden options for benchmarks and tests.
  cmd->add_option("--prompt-ids", opts->prompt_ids, "Prompt as token ids")->group("");
  cmd->add_option("--random-prompt-tokens", opts->random_prompt_tokens,
                  "Prompt of N fixed pseudo-random token ids")
      ->group("");
  cmd->add_flag("--ignore-eos", opts->ignore_eos, "Generate exactly -n tokens")->group("");
  cmd->add_option("--warmup", opts->warmup_runs,
                  "Untimed runs of the prompt (2 tokens each) before the timed one, as "
                  "llama-bench's warm-up: KV pages and workspaces are then touched (benchmarks)")
      ->check(CLI::Range(0, 16))
      ->group("");
  cmd->callback([opts, seed, exit_code]() {
    GenerateOptions o = *opts;
    if (*seed >= 0) {
      o.sampling.seed = static_cast<uint64_t>(*seed);
    } else {
      std::random_device rd;
      o.sampling.seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    }
    *exit_code = RunGenerateCommand(o);
  });
}

void AddAllCommands(CLI::App& app, int* exit_code) {
  AddServeCommand(app, exit_code);
  AddGenerateCommand(app, exit_code);
  AddEmbedCommand(app, exit_code);
  AddTokenizeCommand(app, exit_code);
  AddMkmodelCommand(app, exit_code);
  AddConvertCommand(app, exit_code);
  AddPlanCommand(app, exit_code);
  AddEvalCommand(app, exit_code);
  AddSimCommand(app, exit_code);
  AddPromptLintCommand(app, exit_code);
  AddProfileCommand(app, exit_code);
  AddTemplateCommand(app, exit_code);
  AddBenchCommand(app, exit_code);
}

int RunKvserve(int argc, const char* const* argv) {
  CLI::App app(
      "kvserve: a KV-cache-centric LLM inference engine (CPU).\n"
      "Run `kvserve <command> --help` for the options of each command.",
      "kvserve");
  app.require_subcommand(1);
  app.failure_message([](const CLI::App* failed, const CLI::Error& e) {
    std::string msg = std::string("error: ") + e.what() + "\n";
    std::string name = failed->get_name();
    for (const CLI::App* p = failed->get_parent(); p != nullptr; p = p->get_parent()) {
      name = p->get_name() + " " + name;
    }
    msg += "Run `" + name + " --help` for usage.\n";
    return msg;
  });
  int exit_code = 0;
  AddAllCommands(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return exit_code;
}

}  // namespace kvserve::cli

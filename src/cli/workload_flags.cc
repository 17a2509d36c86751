// The workload flags of `bench serve` and `sim` (see workload_flags.h).
#include "cli/workload_flags.h"

namespace kvserve::cli {

void AddWorkloadFlags(CLI::App* cmd, loadgen::BenchSettings* f) {
  loadgen::DatasetOptions& d = f->dataset;
  cmd->add_option("--num-prompts", d.num_prompts,
                  "Requests to send (default: random 1000, shared-prefix groups x prompts, "
                  "files: all; larger values take what the file has)");
  cmd->add_option("--seed", f->seed, "Seed for prompts and Poisson arrivals")->capture_default_str();
  cmd->add_option("--vocab-range", f->vocab_range,
                  "BEGIN END: token ids are drawn from [BEGIN, END) (default 100 10000)")
      ->expected(2);

  cmd->add_option("--random-input-len", d.random_input_len, "random: prompt tokens")->capture_default_str();
  cmd->add_option("--random-output-len", d.random_output_len, "random: output tokens")->capture_default_str();
  cmd->add_option("--random-range-ratio", d.random_range_ratio,
                  "random: lengths uniform in [len*(1-R), len*(1+R)], R in [0, 1)")
      ->capture_default_str();
  cmd->add_option("--random-prefix-len", d.random_prefix_len,
                  "random: tokens of a prefix common to every prompt (added to the input length)")
      ->capture_default_str();
  cmd->add_option("--repeat-fraction", d.repeat_fraction,
                  "Any dataset: this fraction of the requests repeats an earlier one exactly (a "
                  "response cache's workload; hits are reported from x-kvserve-cache)")
      ->capture_default_str();
  cmd->add_option("--sp-num-groups", d.sp_num_groups, "shared-prefix: groups (one system prompt each)")
      ->capture_default_str();
  cmd->add_option("--sp-prompts-per-group", d.sp_prompts_per_group, "shared-prefix: questions per group")
      ->capture_default_str();
  cmd->add_option("--sp-system-prompt-len", d.sp_system_prompt_len, "shared-prefix: system prompt tokens")
      ->capture_default_str();
  cmd->add_option("--sp-question-len", d.sp_question_len, "shared-prefix: question tokens")
      ->capture_default_str();
  cmd->add_option("--sp-output-len", d.sp_output_len, "shared-prefix: output tokens")->capture_default_str();
  cmd->add_option("--sharegpt-output-len", d.sharegpt_output_len,
                  "sharegpt: output tokens (default: the reply's estimated length, else 256)");
  cmd->add_option("--tokens-per-hash-id", d.tokens_per_hash_id,
                  "mooncake: tokens per hash id (the trace's 512; smaller values shrink prompts "
                  "in proportion)")
      ->capture_default_str();
  cmd->add_option("--trace-time-scale", f->trace_time_scale,
                  "mooncake/azure: multiply the trace's inter-arrival times (0.5 = twice as fast)")
      ->capture_default_str();

  cmd->add_option("--request-rate", f->request_rate,
                  "Requests per second, Poisson arrivals; inf = all at once (default inf; traces: "
                  "their timestamps unless given)");
  cmd->add_option("--max-concurrency", f->max_concurrency,
                  "Most requests in flight at once (default: unbounded, at most 1024)");
}

}  // namespace kvserve::cli

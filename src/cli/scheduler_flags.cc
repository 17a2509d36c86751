#include "cli/scheduler_flags.h"

#include <string>

namespace kvserve::cli {

void AddSchedulerFlags(CLI::App* cmd, SchedulerFlags* flags) {
  const std::string group = "Scheduler";
  cmd->add_option("--max-num-seqs", flags->max_num_seqs, "Most sequences in one engine step")
      ->group(group)
      ->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", flags->max_num_batched_tokens,
                  "Token budget of one engine step (0: max(2048, --max-num-seqs), raised to "
                  "--max-model-len without chunked prefill)")
      ->group(group)
      ->capture_default_str();
  cmd->add_flag("--enable-chunked-prefill,!--no-enable-chunked-prefill",
                flags->enable_chunked_prefill,
                std::string("Split long prompts over steps so that decodes keep going (default: ") +
                    (flags->enable_chunked_prefill ? "on)" : "off)"))
      ->group(group);
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching",
                flags->enable_prefix_caching,
                std::string("Reuse the KV of shared prompt prefixes across requests (default: ") +
                    (flags->enable_prefix_caching ? "on)" : "off)"))
      ->group(group);
  cmd->add_option("--long-prefill-token-threshold", flags->long_prefill_token_threshold,
                  "Most prompt tokens of one request in a step (0: no cap)")
      ->group(group)
      ->capture_default_str();
  cmd->add_option_function<std::string>(
         "--scheduling-policy",
         [flags](const std::string& name) {
           flags->policy = name == "priority" ? SchedulingPolicy::kPriority : SchedulingPolicy::kFcfs;
         },
         std::string("fcfs: by arrival; priority: by the request's 'priority' (lower first), "
                     "then arrival (default: ") +
             (flags->policy == SchedulingPolicy::kPriority ? "priority)" : "fcfs)"))
      ->group(group)
      ->check(CLI::IsMember({"fcfs", "priority"}));
}

}  // namespace kvserve::cli

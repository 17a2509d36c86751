#include "cli/kv_eviction_flags.h"

namespace kvserve::cli {

void AddKvEvictionFlags(CLI::App* cmd, KvEvictionFlags* flags) {
  cmd->add_option("--kv-eviction", flags->method,
                  "Token eviction: none, streaming (sinks + recent window; may run past the "
                  "model's context), h2o, snapkv, pyramidkv (docs/kv-eviction.md)")
      ->capture_default_str();
  cmd->add_option("--kv-budget", flags->policy.budget_tokens,
                  "Tokens of KV kept per layer and KV head with --kv-eviction")
      ->capture_default_str();
  cmd->add_option("--kv-sink-tokens", flags->policy.sink_tokens,
                  "First tokens always kept (attention sinks)")
      ->capture_default_str();
  cmd->add_option("--kv-window", flags->window_tokens,
                  "Most recent tokens always kept (default: the method's own)");
  cmd->add_option("--kv-observation-window", flags->policy.observation_window,
                  "snapkv/pyramidkv: the last prompt tokens whose attention votes")
      ->capture_default_str();
}

StatusOr<KvEvictionPolicy> ResolveKvEvictionFlags(const KvEvictionFlags& flags) {
  KvEvictionPolicy policy = flags.policy;
  StatusOr<KvEvictionMethod> method = ParseKvEvictionMethod(flags.method);
  if (!method.ok()) return InvalidArgumentError("--kv-eviction: " + method.status().message());
  policy.method = *method;
  if (flags.window_tokens >= 0) policy.window_tokens = flags.window_tokens;
  if (Status s = policy.Validate(); !s.ok()) {
    // Validate names the policy field; say which flag sets it.
    std::string m = s.message();
    for (const auto& [field, flag] :
         {std::pair<const char*, const char*>{"budget_tokens", "--kv-budget"},
          {"sink_tokens", "--kv-sink-tokens"},
          {"window_tokens", "--kv-window"},
          {"observation_window", "--kv-observation-window"}}) {
      if (m.rfind(field, 0) == 0) return InvalidArgumentError(std::string(flag) + ": " + m);
    }
    return InvalidArgumentError("--kv-eviction: " + m);
  }
  return policy;
}

}  // namespace kvserve::cli

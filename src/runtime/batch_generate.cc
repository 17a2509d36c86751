#include "runtime/batch_generate.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

namespace kvserve {
namespace {

double Ms(EngineClock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace

StatusOr<BatchResult> GenerateBatch(Engine& engine, std::vector<RequestInput> inputs) {
  const size_t n = inputs.size();
  BatchResult result;
  BatchSummary& sum = result.summary;
  sum.num_requests = static_cast<int64_t>(n);
  for (const RequestInput& in : inputs) {
    sum.total_prompt_tokens += static_cast<int64_t>(in.prompt_ids.size());
  }
  const EngineClock::time_point start = EngineClock::now();
  std::vector<std::unique_ptr<RequestStream>> streams;
  for (size_t i = 0; i < n; ++i) {
    auto stream = engine.submit(std::move(inputs[i]));
    if (!stream.ok()) return stream.status().WithContext("request " + std::to_string(i));
    streams.push_back(std::move(stream).value());
  }

  result.outputs.resize(n);
  EngineClock::time_point last = start;
  int64_t num_ttft = 0, num_tpot = 0;
  for (size_t i = 0; i < n; ++i) {
    BatchOutput& out = result.outputs[i];
    RequestStream& s = *streams[i];
    StreamEvent ev;
    EngineClock::time_point first_token, last_token;
    while (s.Next(&ev)) {
      if (!ev.token_ids.empty()) {
        if (out.token_ids.empty()) first_token = ev.time;
        last_token = ev.time;
        out.token_ids.insert(out.token_ids.end(), ev.token_ids.begin(), ev.token_ids.end());
      }
      out.num_cached_prompt_tokens = std::max(out.num_cached_prompt_tokens,
                                              ev.num_cached_prompt_tokens);
      if (ev.finished()) {
        out.finish_reason = ev.finish_reason;
        out.error = ev.error;
        last = std::max(last, ev.time);
      }
    }
    const size_t num_tokens = out.token_ids.size();
    sum.total_output_tokens += static_cast<int64_t>(num_tokens);
    if (num_tokens > 0) {
      out.ttft_ms = Ms(first_token - s.submit_time());
      sum.mean_ttft_ms += out.ttft_ms;
      ++num_ttft;
    }
    if (num_tokens > 1) {
      out.tpot_ms = Ms(last_token - first_token) / static_cast<double>(num_tokens - 1);
      sum.mean_tpot_ms += out.tpot_ms;
      ++num_tpot;
    }
    if (out.finish_reason == FinishReason::kError || out.finish_reason == FinishReason::kAbort) {
      ++sum.num_failed;
    }
  }
  const EngineStats stats = engine.wait_until_idle();
  sum.elapsed_s = std::chrono::duration<double>(last - start).count();
  sum.output_tokens_per_s =
      sum.elapsed_s > 0 ? static_cast<double>(sum.total_output_tokens) / sum.elapsed_s : 0.0;
  if (num_ttft > 0) sum.mean_ttft_ms /= static_cast<double>(num_ttft);
  if (num_tpot > 0) sum.mean_tpot_ms /= static_cast<double>(num_tpot);
  sum.prefix_cache_hit_rate = stats.prefix_queries_tokens > 0
                                  ? static_cast<double>(stats.prefix_hits_tokens) /
                                        static_cast<double>(stats.prefix_queries_tokens)
                                  : 0.0;
  sum.num_steps = stats.num_steps;
  sum.num_preemptions = stats.num_preemptions_total;
  sum.max_num_running = stats.max_num_running;
  return result;
}

int64_t BatchKvBlocks(const PagedKvCache& kv, const std::vector<RequestInput>& inputs) {
  int64_t blocks = 0;
  for (const RequestInput& in : inputs) {
    blocks += kv.spec.blocks_for_tokens(static_cast<int64_t>(in.prompt_ids.size()) +
                                        std::max<int64_t>(in.max_tokens, 0));
  }
  return std::min(blocks, kv.num_blocks());
}

}  // namespace kvserve

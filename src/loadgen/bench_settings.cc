#include "loadgen/bench_settings.h"

#include <cstdlib>
#include <limits>

namespace kvserve::loadgen {

StatusOr<double> ParseRequestRate(const std::string& text) {
  if (text == "inf" || text == "Inf" || text == "infinity") {
    return std::numeric_limits<double>::infinity();
  }
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(v > 0.0)) {
    return InvalidArgumentError("--request-rate must be a number > 0 or 'inf', got '" + text +
                                "'");
  }
  return v;
}

StatusOr<ResolvedBench> ResolveBenchSettings(const BenchSettings& f) {
  ResolvedBench r;
  const bool chat = f.endpoint.find("chat") != std::string::npos;
  DatasetOptions& d = r.dataset;
  d = f.dataset;
  d.seed = static_cast<uint64_t>(f.seed);
  if (f.prompt_format == "text" || (f.prompt_format == "auto" && chat)) {
    d.prompt_format = PromptFormat::kText;
  } else if (f.prompt_format == "token-ids" && chat) {
    return InvalidArgumentError(
        "--prompt-format token-ids needs /v1/completions (chat messages are text)");
  }
  if (!f.vocab_range.empty()) {
    if (f.vocab_range.size() != 2 || f.vocab_range[0] < 0 ||
        f.vocab_range[1] <= f.vocab_range[0] ||
        f.vocab_range[1] > std::numeric_limits<int32_t>::max()) {
      return InvalidArgumentError("--vocab-range must be BEGIN END with 0 <= BEGIN < END");
    }
    d.vocab_begin = static_cast<int32_t>(f.vocab_range[0]);
    d.vocab_end = static_cast<int32_t>(f.vocab_range[1]);
  }

  BenchmarkOptions& o = r.options;
  o.client.base_url =
      f.base_url.empty() ? "http://" + f.host + ":" + std::to_string(f.port) : f.base_url;
  o.client.api_key = f.api_key;
  if (!(f.request_timeout_s > 0.0)) return InvalidArgumentError("--request-timeout must be > 0");
  o.client.read_timeout_s = f.request_timeout_s;
  o.body.endpoint = f.endpoint.empty() || f.endpoint[0] != '/' ? "/" + f.endpoint : f.endpoint;
  o.body.model = f.model;
  o.body.temperature = f.temperature;
  o.body.allow_ignore_eos = f.ignore_eos;
  o.body.extra_body_json = f.extra_body;
  o.dataset_name = d.name;
  if (f.request_rate_given) {
    KV_ASSIGN_OR_RETURN(o.arrivals.request_rate_per_s, ParseRequestRate(f.request_rate));
  }
  o.arrivals.trace_time_scale = f.trace_time_scale;
  o.arrivals.seed = static_cast<uint64_t>(f.seed);
  o.max_concurrency = f.max_concurrency;
  o.scrape_metrics = f.scrape_metrics;
  return r;
}

nlohmann::json DatasetToJson(const DatasetOptions& d) {
  nlohmann::json j;
  j["name"] = d.name;
  if (!d.dataset_path.empty()) j["path"] = d.dataset_path;
  j["num_prompts"] = d.num_prompts;
  j["seed"] = d.seed;
  j["prompt_format"] = d.prompt_format == PromptFormat::kText ? "text" : "token-ids";
  j["vocab_range"] = {d.vocab_begin, d.vocab_end};
  if (d.name == "random") {
    j["random_input_len"] = d.random_input_len;
    j["random_output_len"] = d.random_output_len;
    j["random_range_ratio"] = d.random_range_ratio;
    j["random_prefix_len"] = d.random_prefix_len;
  } else if (d.name == "shared-prefix") {
    j["sp_num_groups"] = d.sp_num_groups;
    j["sp_prompts_per_group"] = d.sp_prompts_per_group;
    j["sp_system_prompt_len"] = d.sp_system_prompt_len;
    j["sp_question_len"] = d.sp_question_len;
    j["sp_output_len"] = d.sp_output_len;
  } else if (d.name == "sharegpt") {
    j["sharegpt_output_len"] = d.sharegpt_output_len;
  } else if (d.name == "mooncake") {
    j["tokens_per_hash_id"] = d.tokens_per_hash_id;
  }
  return j;
}

nlohmann::json BenchResultFileJson(const BenchmarkResult& result, const BenchmarkSummary& summary,
                                   const BenchSettings& settings, const ResolvedBench& resolved,
                                   const std::string& date_iso8601) {
  nlohmann::json j = ResultToJson(result, summary);
  j["date"] = date_iso8601;
  j["dataset"] = DatasetToJson(resolved.dataset);
  j["temperature"] = settings.temperature;
  j["ignore_eos_allowed"] = settings.ignore_eos;
  if (!settings.extra_body.empty()) {
    j["extra_body"] = nlohmann::json::parse(settings.extra_body, nullptr, false);
  }
  return j;
}

}  // namespace kvserve::loadgen

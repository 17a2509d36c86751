// `kvserve bench serve`: a load generator for any OpenAI-compatible server (kvserve serve,
// vLLM, llama.cpp's llama-server). The work is done by src/loadgen; this file is the command
// line. See docs/cli.md.
#include <sys/resource.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "loadgen/bench.h"

namespace kvserve::cli {
namespace {

using loadgen::BenchmarkOptions;
using loadgen::DatasetOptions;

struct BenchServeFlags {
  std::string base_url;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string endpoint = "/v1/completions";
  std::string model;
  std::string api_key;
  std::string request_rate = "inf";
  bool request_rate_given = false;
  int64_t max_concurrency = 0;
  double trace_time_scale = 1.0;
  double temperature = 0.0;
  bool ignore_eos = true;
  std::string extra_body;
  std::string result_file;
  bool scrape_metrics = true;
  bool progress = true;
  double request_timeout_s = 600.0;
  std::string prompt_format = "auto";
  std::vector<int64_t> vocab_range;
  int64_t seed = 0;
  DatasetOptions dataset;
};

StatusOr<double> ParseRate(const std::string& s) {
  if (s == "inf" || s == "Inf" || s == "infinity") return std::numeric_limits<double>::infinity();
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !(v > 0.0)) {
    return InvalidArgumentError("--request-rate must be a number > 0 or 'inf', got '" + s + "'");
  }
  return v;
}

std::string NowIso8601() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Many concurrent streams need many sockets: lift the soft descriptor limit to the hard one.
void RaiseOpenFileLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
  }
}

nlohmann::json DatasetJson(const DatasetOptions& d) {
  nlohmann::json j;
  j["name"] = d.name;
  if (!d.dataset_path.empty()) j["path"] = d.dataset_path;
  j["num_prompts"] = d.num_prompts;
  j["seed"] = d.seed;
  j["prompt_format"] = d.prompt_format == loadgen::PromptFormat::kText ? "text" : "token-ids";
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

int RunBenchServe(BenchServeFlags f) {
  const bool chat = f.endpoint.find("chat") != std::string::npos;
  DatasetOptions& d = f.dataset;
  d.seed = static_cast<uint64_t>(f.seed);
  if (f.prompt_format == "text" || (f.prompt_format == "auto" && chat)) {
    d.prompt_format = loadgen::PromptFormat::kText;
  } else if (f.prompt_format == "token-ids" && chat) {
    return ReportError(InvalidArgumentError(
        "--prompt-format token-ids needs /v1/completions (chat messages are text)"));
  }
  if (!f.vocab_range.empty()) {
    if (f.vocab_range.size() != 2 || f.vocab_range[0] < 0 || f.vocab_range[1] <= f.vocab_range[0] ||
        f.vocab_range[1] > std::numeric_limits<int32_t>::max()) {
      return ReportError(InvalidArgumentError("--vocab-range must be BEGIN END with 0 <= BEGIN < END"));
    }
    d.vocab_begin = static_cast<int32_t>(f.vocab_range[0]);
    d.vocab_end = static_cast<int32_t>(f.vocab_range[1]);
  }

  BenchmarkOptions o;
  o.client.base_url = f.base_url.empty() ? "http://" + f.host + ":" + std::to_string(f.port) : f.base_url;
  o.client.api_key = f.api_key;
  if (o.client.api_key.empty()) {
    if (const char* env = std::getenv("OPENAI_API_KEY")) o.client.api_key = env;
  }
  if (!(f.request_timeout_s > 0.0)) return ReportError(InvalidArgumentError("--request-timeout must be > 0"));
  o.client.read_timeout_s = f.request_timeout_s;
  o.body.endpoint = f.endpoint.empty() || f.endpoint[0] != '/' ? "/" + f.endpoint : f.endpoint;
  o.body.model = f.model;
  o.body.temperature = f.temperature;
  o.body.allow_ignore_eos = f.ignore_eos;
  o.body.extra_body_json = f.extra_body;
  o.dataset_name = d.name;
  if (f.request_rate_given) {
    StatusOr<double> rate = ParseRate(f.request_rate);
    if (!rate.ok()) return ReportError(rate.status());
    o.arrivals.request_rate_per_s = *rate;
  }
  o.arrivals.trace_time_scale = f.trace_time_scale;
  o.arrivals.seed = static_cast<uint64_t>(f.seed);
  o.max_concurrency = f.max_concurrency;
  o.scrape_metrics = f.scrape_metrics;

  StatusOr<std::vector<loadgen::BenchRequest>> requests = loadgen::BuildDataset(d);
  if (!requests.ok()) return ReportError(requests.status());
  int64_t prompt_tokens = 0;
  for (const auto& r : *requests) prompt_tokens += r.prompt_len;
  std::fprintf(stderr, "bench serve: %zu requests (%s, %lld prompt tokens%s) -> %s%s, rate %s, "
               "max concurrency %s\n",
               requests->size(), d.name.c_str(), static_cast<long long>(prompt_tokens),
               d.prompt_format == loadgen::PromptFormat::kText ? ", approximate: text" : "",
               o.client.base_url.c_str(), o.body.endpoint.c_str(),
               o.arrivals.request_rate_per_s ? f.request_rate.c_str()
               : (*requests)[0].trace_arrival_ms >= 0 ? "trace timestamps" : "inf",
               f.max_concurrency > 0 ? std::to_string(f.max_concurrency).c_str() : "unbounded");
  RaiseOpenFileLimit();

  std::unique_ptr<loadgen::ProgressBar> bar;
  if (f.progress) bar = std::make_unique<loadgen::ProgressBar>(stderr);
  loadgen::ProgressCallback progress;
  if (bar) progress = [&](int64_t done, int64_t total, double s) { bar->Update(done, total, s); };
  StatusOr<loadgen::BenchmarkResult> result = loadgen::RunBenchmark(o, *requests, progress);
  if (bar) bar->Finish();
  if (!result.ok()) return ReportError(result.status());

  const loadgen::BenchmarkSummary summary = loadgen::Summarize(*result);
  int shown = 0;
  for (const auto& [msg, count] : summary.errors) {
    if (shown++ == 5) {
      std::fprintf(stderr, "  ... %zu more distinct errors (see --result-file)\n", summary.errors.size() - 5);
      break;
    }
    std::fprintf(stderr, "failed: %lldx %s\n", static_cast<long long>(count), msg.c_str());
  }
  std::fputs(loadgen::FormatSummaryTable(*result, summary).c_str(), stdout);
  std::fflush(stdout);

  if (!f.result_file.empty()) {
    nlohmann::json j = loadgen::ResultToJson(*result, summary);
    j["date"] = NowIso8601();
    j["dataset"] = DatasetJson(d);
    j["temperature"] = f.temperature;
    j["ignore_eos_allowed"] = f.ignore_eos;
    if (!f.extra_body.empty()) j["extra_body"] = nlohmann::json::parse(f.extra_body, nullptr, false);
    std::ofstream out(f.result_file);
    out << j.dump(2) << "\n";
    out.close();
    if (!out) return ReportError(DataLossError("cannot write --result-file " + f.result_file));
    std::fprintf(stderr, "bench serve: results written to %s\n", f.result_file.c_str());
  }
  return summary.num_successful == 0 ? 1 : 0;
}

}  // namespace

void AddBenchCommand(CLI::App& app, int* exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto f = std::make_shared<BenchServeFlags>();
  DatasetOptions& d = f->dataset;
  CLI::App* cmd = bench->add_subcommand(
      "serve",
      "Load-test an OpenAI-compatible server (kvserve serve, vLLM, llama.cpp's llama-server):\n"
      "stream requests from a dataset at a request rate and/or concurrency, report TTFT, TPOT,\n"
      "ITL, end-to-end latency, throughput and the prefix-cache hit rate.");
  cmd->add_option("--base-url", f->base_url,
                  "Server URL, e.g. http://127.0.0.1:8000 (default: http://HOST:PORT)");
  cmd->add_option("--host", f->host, "Server host when --base-url is not given")->capture_default_str();
  cmd->add_option("--port", f->port, "Server port when --base-url is not given")->capture_default_str();
  cmd->add_option("--endpoint", f->endpoint, "/v1/completions or /v1/chat/completions")
      ->capture_default_str();
  cmd->add_option("--model", f->model, "Model name to send (default: the first of GET /v1/models)");
  cmd->add_option("--api-key", f->api_key, "Sent as a Bearer token (default: $OPENAI_API_KEY)");

  cmd->add_option("--dataset-name", d.name, "random, shared-prefix, sharegpt, mooncake or azure")
      ->check(CLI::IsMember({"random", "shared-prefix", "sharegpt", "mooncake", "azure"}))
      ->capture_default_str();
  cmd->add_option("--dataset-path", d.dataset_path,
                  "sharegpt JSON, mooncake JSONL or azure CSV file");
  cmd->add_option("--num-prompts", d.num_prompts,
                  "Requests to send (default: random 1000, shared-prefix groups x prompts, "
                  "files: all; larger values take what the file has)");
  cmd->add_option("--seed", f->seed, "Seed for prompts and Poisson arrivals")->capture_default_str();
  cmd->add_option("--prompt-format", f->prompt_format,
                  "token-ids: prompts as token id arrays (exact lengths); text: plain text, one "
                  "common word per token (approximate lengths); auto: text for chat, else ids")
      ->check(CLI::IsMember({"auto", "token-ids", "text"}))
      ->capture_default_str();
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
  cmd->add_option("--temperature", f->temperature, "Sampling temperature sent")->capture_default_str();
  cmd->add_flag("--ignore-eos,!--no-ignore-eos", f->ignore_eos,
                "Send ignore_eos when the dataset fixes output lengths (default on)");
  cmd->add_option("--extra-body", f->extra_body, "JSON object merged into every request body");
  cmd->add_option("--request-timeout", f->request_timeout_s,
                  "Seconds of silence from the server before a request fails")
      ->capture_default_str();
  cmd->add_flag("--metrics,!--no-metrics", f->scrape_metrics,
                "Scrape /metrics before and after for the prefix-cache hit rate (default on)");
  cmd->add_flag("--progress,!--no-progress", f->progress, "Progress bar on stderr (default on)");
  cmd->add_option("--result-file", f->result_file,
                  "Write settings, summary and per-request arrays as JSON to this file");
  cmd->callback([f, cmd, exit_code]() {
    BenchServeFlags flags = *f;
    flags.request_rate_given = cmd->count("--request-rate") > 0;
    *exit_code = RunBenchServe(std::move(flags));
  });
}

}  // namespace kvserve::cli

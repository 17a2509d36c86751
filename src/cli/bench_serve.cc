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
#include "cli/workload_flags.h"
#include "loadgen/bench.h"
#include "loadgen/bench_settings.h"

namespace kvserve::cli {
namespace {

using loadgen::DatasetOptions;

// The flags: the benchmark's settings (loadgen/bench_settings.h) plus this command's output.
struct BenchServeFlags {
  loadgen::BenchSettings settings;
  std::string result_file;
  bool progress = true;
};

// Many concurrent streams need many sockets: lift the soft descriptor limit to the hard one.
void RaiseOpenFileLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
  }
}

int RunBenchServe(BenchServeFlags flags) {
  loadgen::BenchSettings& f = flags.settings;
  if (f.api_key.empty()) {
    if (const char* env = std::getenv("OPENAI_API_KEY")) f.api_key = env;
  }
  StatusOr<loadgen::ResolvedBench> resolved = loadgen::ResolveBenchSettings(f);
  if (!resolved.ok()) return ReportError(resolved.status());
  const DatasetOptions& d = resolved->dataset;
  const loadgen::BenchmarkOptions& o = resolved->options;

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
  if (flags.progress) bar = std::make_unique<loadgen::ProgressBar>(stderr);
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

  if (!flags.result_file.empty()) {
    const nlohmann::json j =
        loadgen::BenchResultFileJson(*result, summary, f, *resolved, NowIso8601());
    const Status written = WriteOutputFile("--result-file", flags.result_file, j.dump(2) + "\n");
    if (!written.ok()) return ReportError(written);
    std::fprintf(stderr, "bench serve: results written to %s\n", flags.result_file.c_str());
  }
  return summary.num_successful == 0 ? 1 : 0;
}

}  // namespace

void AddBenchCommand(CLI::App& app, int* exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto flags = std::make_shared<BenchServeFlags>();
  loadgen::BenchSettings* f = &flags->settings;
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
  cmd->add_option("--prompt-format", f->prompt_format,
                  "token-ids: prompts as token id arrays (exact lengths); text: plain text, one "
                  "common word per token (approximate lengths); auto: text for chat, else ids")
      ->check(CLI::IsMember({"auto", "token-ids", "text"}))
      ->capture_default_str();
  AddWorkloadFlags(cmd, f);
  cmd->add_option("--temperature", f->temperature, "Sampling temperature sent")->capture_default_str();
  cmd->add_flag("--ignore-eos,!--no-ignore-eos", f->ignore_eos,
                "Send ignore_eos when the dataset fixes output lengths (default on)");
  cmd->add_option("--extra-body", f->extra_body, "JSON object merged into every request body");
  cmd->add_option("--request-timeout", f->request_timeout_s,
                  "Seconds of silence from the server before a request fails")
      ->capture_default_str();
  cmd->add_flag("--metrics,!--no-metrics", f->scrape_metrics,
                "Scrape /metrics before and after for the prefix-cache hit rate (default on)");
  cmd->add_flag("--progress,!--no-progress", flags->progress, "Progress bar on stderr (default on)");
  cmd->add_option("--result-file", flags->result_file,
                  "Write settings, summary and per-request arrays as JSON to this file");
  cmd->callback([flags, cmd, exit_code]() {
    BenchServeFlags given = *flags;
    given.settings.request_rate_given = cmd->count("--request-rate") > 0;
    *exit_code = RunBenchServe(std::move(given));
  });
}

}  // namespace kvserve::cli

// Registration of the `kvserve` subcommands on a CLI11 app. Each Add*Command creates the
// subcommand with its options and a callback that runs it and stores the process exit status
// in *exit_code. The options live as long as the app (owned by the callbacks).
#pragma once

#include <CLI/CLI.hpp>

namespace kvserve::cli {

void AddGenerateCommand(CLI::App& app, int* exit_code);
void AddEmbedCommand(CLI::App& app, int* exit_code);
void AddTokenizeCommand(CLI::App& app, int* exit_code);
void AddMkmodelCommand(CLI::App& app, int* exit_code);
void AddConvertCommand(CLI::App& app, int* exit_code);
// `kvserve eval perplexity` (cli/eval.cc).
void AddEvalCommand(CLI::App& app, int* exit_code);
// `kvserve template`: renders a chat template (cli/template_cmd.cc).
void AddTemplateCommand(CLI::App& app, int* exit_code);
// `kvserve sim` (cli/sim_cmd.cc): trace replay through the scheduler and prefix cache.
void AddSimCommand(CLI::App& app, int* exit_code);
// `kvserve prompt-lint` (cli/prompt_lint_cmd.cc): prompt spans that defeat the prefix cache.
void AddPromptLintCommand(CLI::App& app, int* exit_code);
// `kvserve profile` (cli/profile_cmd.cc): measures this machine for the cost model.
void AddProfileCommand(CLI::App& app, int* exit_code);
// `kvserve bench serve` (cli/bench_serve.cc): load generator for OpenAI-compatible servers.
void AddBenchCommand(CLI::App& app, int* exit_code);

// `kvserve serve`: the OpenAI-compatible HTTP server (cli/serve.cc).
void AddServeCommand(CLI::App& app, int* exit_code);

// Builds the whole `kvserve` app (all subcommands); used by main() and tests.
void AddAllCommands(CLI::App& app, int* exit_code);

// Parses argv and runs the chosen subcommand; returns the process exit status. Parse errors
// print "error: ..." (plus a hint to --help) on stderr and return 2 (help/version return 0).
int RunKvserve(int argc, const char* const* argv);

}  // namespace kvserve::cli

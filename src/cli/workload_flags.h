// The workload flags shared by `bench serve` and `sim` (which predicts what bench serve would
// measure): the datasets' sizes and shapes, the seed, the vocabulary range, the arrivals
// (--request-rate, --trace-time-scale) and --max-concurrency, with one help text each. The
// commands register --dataset-name and --dataset-path themselves (sim also takes --trace).
#pragma once

#include <CLI/CLI.hpp>

#include "loadgen/bench_settings.h"

namespace kvserve::cli {

// Registers the flags on `cmd`; `settings` must outlive the parse.
void AddWorkloadFlags(CLI::App* cmd, loadgen::BenchSettings* settings);

}  // namespace kvserve::cli

// `kvserve profile`: flags, the model, progress and the profile file (the measurements are
// profile/profile.h; see docs/cost.md).
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/model_setup.h"
#include "cost/step_log.h"
#include "plan/plan_model.h"
#include "profile/step_fit.h"
#include "profile/profile.h"
#include "kernels/kernels.h"

namespace kvserve::cli {
namespace {

struct ProfileCommandOptions {
  std::string model_path;
  std::string output_path;
  std::string name;
  int threads = 0;
  int repetitions = 5;
  std::string refit_path;     // --refit: a profile to fit again to --step-log's steps
  std::string step_log_path;  // --step-log
};

// Writes `j` to `path` (stdout for "" or "-").
Status WriteJson(const nlohmann::json& j, const std::string& path) {
  const std::string text = j.dump(2) + "\n";
  if (path.empty() || path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return OkStatus();
  }
  return WriteOutputFile("--output", path, text);
}

// --refit: no measuring; the engine terms of an existing profile fitted to a served step log.
int RunRefit(const ProfileCommandOptions& o, const plan::PlanModel& shape) {
  if (o.step_log_path.empty()) {
    return ReportError(InvalidArgumentError("profile --refit needs --step-log FILE (written by "
                                            "`kvserve serve --step-log FILE`)"));
  }
  StatusOr<nlohmann::json> base = cost::ReadHardwareProfileFile("--refit", o.refit_path);
  if (!base.ok()) return ReportError(base.status());
  StatusOr<cost::StepLog> log = cost::ReadStepLog(o.step_log_path);
  if (!log.ok()) return ReportError(log.status());
  StatusOr<profile::ProfileResult> result =
      profile::RefitToStepLog(*base, shape, *log, o.step_log_path);
  if (!result.ok()) return ReportError(result.status());
  if (!o.name.empty()) result->profile.name = o.name;
  Status written = WriteJson(profile::ProfileToJson(*result), o.output_path);
  if (!written.ok()) return ReportError(written);
  const nlohmann::json& fit = result->measurements["served_step_fit"];
  const cost::Efficiency& e = result->profile.efficiency;
  std::fprintf(stderr,
               "profile: refitted to %lld served steps: %.2f x the profile's rooflines + %.2f "
               "ms/step + %.1f us/token; median step error %.0f%% -> %.0f%%, total time "
               "predicted / measured %.2f -> %.2f%s%s\n",
               static_cast<long long>(log->steps.size()), fit["engine_scale"].get<double>(),
               e.step_overhead_s * 1e3, e.token_overhead_s * 1e6,
               100.0 * fit["median_relative_error_before"].get<double>(),
               100.0 * fit["median_relative_error"].get<double>(),
               fit["predicted_over_measured_total_before"].get<double>(),
               fit["predicted_over_measured_total"].get<double>(),
               o.output_path.empty() ? "" : "; wrote ", o.output_path.c_str());
  return 0;
}

int RunProfileCommand(const ProfileCommandOptions& o) {
  if (o.model_path.empty()) {
    return ReportError(InvalidArgumentError("profile: --model FILE is required (the shapes to "
                                            "measure; a GGUF file, e.g. from `kvserve mkmodel`)"));
  }
  if (o.threads < 0) return ReportError(InvalidArgumentError("--threads must be >= 1"));
  if (o.repetitions < 1) return ReportError(InvalidArgumentError("--repetitions must be >= 1"));
  StatusOr<plan::PlanModel> shape = plan::LoadPlanModel(o.model_path);
  if (!shape.ok()) return ReportError(shape.status());
  if (!o.refit_path.empty()) return RunRefit(o, *shape);
  if (!o.step_log_path.empty()) {
    return ReportError(InvalidArgumentError("--step-log goes with --refit PROFILE.json"));
  }
  CommandModelOptions model_options;
  model_options.model_path = o.model_path;
  StatusOr<CommandModel> model = LoadCommandModel(model_options);
  if (!model.ok()) return ReportError(model.status());
  const int threads = o.threads > 0 ? o.threads : ThreadPool::HardwareThreads();
  ThreadPool pool(threads);

  profile::ProfileOptions options;
  options.repetitions = o.repetitions;
  if (!o.name.empty()) {
    options.name = o.name;
  } else if (!o.output_path.empty()) {
    std::string base = o.output_path.substr(o.output_path.find_last_of('/') + 1);
    if (base.size() > 5 && base.compare(base.size() - 5, 5, ".json") == 0) base.resize(base.size() - 5);
    options.name = base;
  }
  std::unique_ptr<ProgressLine> line;
  std::string stage;
  options.progress = [&](const std::string& s, int64_t done, int64_t total) {
    if (s != stage) {
      if (line) line->Finish();
      stage = s;
      static const std::map<std::string, std::string> kUnits = {
          {"ceilings", "ceilings"}, {"matmul", "row counts"}, {"attention", "dtype x context"},
          {"engine", "engine step kinds"}};
      const auto unit = kUnits.find(s);
      line = std::make_unique<ProgressLine>("profile: " + s,
                                            unit == kUnits.end() ? "steps" : unit->second);
    }
    line->Update(done, total);
  };
  std::fprintf(stderr, "profile: %s on %d threads (%s kernels)\n", shape->name.c_str(), threads,
               kernels::SimdLevelName());
  StatusOr<profile::ProfileResult> result =
      profile::ProfileMachine(*model->model, *shape, &pool, options);
  if (line) line->Finish();
  if (!result.ok()) return ReportError(result.status());
  Status written = WriteJson(profile::ProfileToJson(*result), o.output_path);
  if (!written.ok()) return ReportError(written);
  const cost::HardwareProfile& hw = result->profile;
  std::fprintf(stderr,
               "profile: read %.1f GB/s, f32 FMA %.0f GFLOP/s, int8 dot %.0f GOP/s; matmul "
               "efficiency %.2f (1 row) .. %.2f (%g rows); engine steps: %.2f x the kernels' "
               "rooflines + %.2f ms/step + %.1f us/token (median error %.0f%%)%s%s\n",
               hw.memory_bandwidth_bytes_per_s / 1e9, hw.peak_flops_f32 / 1e9,
               hw.peak_flops_int8 / 1e9, hw.efficiency.matmul.points.front().second,
               hw.efficiency.matmul.points.back().second, hw.efficiency.matmul.points.back().first,
               result->measurements["overhead_fit"]["engine_scale"].get<double>(),
               hw.efficiency.step_overhead_s * 1e3, hw.efficiency.token_overhead_s * 1e6,
               100.0 * result->measurements["overhead_fit"]["median_relative_error"].get<double>(),
               o.output_path.empty() ? "" : "; wrote ", o.output_path.c_str());
  return 0;
}

}  // namespace

void AddProfileCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<ProfileCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "profile",
      "Measure this machine for the cost model: memory bandwidth, FMA and int8 peaks, how close "
      "kvserve's matmul and paged-attention kernels come to them on a model's shapes, and the "
      "engine's per-step and per-token overheads. Writes a hardware profile for "
      "`sim --hardware FILE.json` and `plan --hardware FILE.json`.");
  cmd->add_option("-m,--model", opts->model_path, "Model file whose shapes are measured (GGUF)");
  cmd->add_option("-o,--output", opts->output_path, "Profile file to write (default: stdout)");
  cmd->add_option("--name", opts->name, "The profile's name (default: the output file's name)");
  cmd->add_option("-t,--threads", opts->threads, "Threads (default: all hardware threads)");
  cmd->add_option("--repetitions", opts->repetitions, "Runs per measurement (median)")
      ->capture_default_str();
  cmd->add_option("--refit", opts->refit_path,
                  "Measure nothing: fit this profile's engine terms (the scale on the kernels' "
                  "rooflines, the per-step and per-token costs) again to the steps of "
                  "--step-log, a `kvserve serve --step-log` run of the same model and threads");
  cmd->add_option("--step-log", opts->step_log_path,
                  "The served steps --refit fits to (JSON lines from `kvserve serve --step-log`)");
  cmd->callback([opts, exit_code]() { *exit_code = RunProfileCommand(*opts); });
}

}  // namespace kvserve::cli

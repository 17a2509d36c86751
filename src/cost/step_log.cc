// The step log's format (see step_log.h).
#include "cost/step_log.h"

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

namespace kvserve::cost {
namespace {

using json = nlohmann::json;
constexpr const char* kMagic = "kvserve_step_log";

Status LineError(const std::string& path, int64_t line, const std::string& what) {
  return InvalidArgumentError(path + ":" + std::to_string(line) + ": " + what);
}

}  // namespace

std::string StepLogHeaderLine(const StepLogHeader& h) {
  return json{{kMagic, 1},
              {"model", h.model},
              {"kv_cache_dtype", h.kv_cache_dtype},
              {"block_size", h.block_size},
              {"threads", h.threads},
              {"simd_level", h.simd_level}}
      .dump();
}

std::string StepLogLine(const LoggedStep& step) {
  json seqs = json::array();
  for (const StepSeq& s : step.seqs) {
    seqs.push_back({s.num_computed_tokens, s.num_new_tokens, s.samples ? 1 : 0});
  }
  return json{{"seconds", step.seconds}, {"seqs", std::move(seqs)}}.dump();
}

StatusOr<std::unique_ptr<StepLogWriter>> StepLogWriter::Open(const std::string& path,
                                                             const StepLogHeader& header) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << StepLogHeaderLine(header) << '\n' << std::flush;
  if (!out) return InvalidArgumentError("cannot write the step log " + path);
  return std::unique_ptr<StepLogWriter>(new StepLogWriter(std::move(out)));
}

void StepLogWriter::Write(const LoggedStep& step) {
  out_ << StepLogLine(step) << '\n' << std::flush;
  ++num_steps_;
}

StatusOr<StepLog> ReadStepLog(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgumentError("cannot read the step log " + path);
  StepLog log;
  std::string text;
  int64_t line_no = 0;
  bool have_header = false;
  while (std::getline(in, text)) {
    ++line_no;
    if (text.empty()) continue;
    const bool last = in.peek() == std::char_traits<char>::eof();
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      if (last && have_header) break;  // cut short by a kill
      return LineError(path, line_no, "not JSON");
    }
    if (!have_header) {
      if (!j.is_object() || !j.contains(kMagic)) {
        return LineError(path, line_no,
                         "not a step log (the first line must be the header `kvserve serve "
                         "--step-log` writes)");
      }
      try {
        log.header.model = j.value("model", "");
        log.header.kv_cache_dtype = j.at("kv_cache_dtype").get<std::string>();
        log.header.block_size = j.at("block_size").get<int64_t>();
        log.header.threads = j.value("threads", 0);
        log.header.simd_level = j.value("simd_level", "");
      } catch (const json::exception& e) {
        return LineError(path, line_no, std::string("bad header: ") + e.what());
      }
      if (log.header.block_size < 1) return LineError(path, line_no, "block_size must be >= 1");
      have_header = true;
      continue;
    }
    LoggedStep step;
    try {
      step.seconds = j.at("seconds").get<double>();
      for (const json& s : j.at("seqs")) {
        if (!s.is_array() || s.size() != 3) {
          return LineError(path, line_no, "each sequence is [held, new, samples]");
        }
        StepSeq seq{s[0].get<int64_t>(), s[1].get<int64_t>(), s[2].get<int64_t>() != 0};
        if (seq.num_computed_tokens < 0 || seq.num_new_tokens < 1) {
          return LineError(path, line_no, "held must be >= 0 and new >= 1");
        }
        step.seqs.push_back(seq);
      }
    } catch (const json::exception& e) {
      return LineError(path, line_no, std::string("bad step: ") + e.what());
    }
    if (!std::isfinite(step.seconds) || step.seconds <= 0.0) {
      return LineError(path, line_no, "seconds must be a positive number");
    }
    if (step.seqs.empty()) return LineError(path, line_no, "a step with no sequences");
    log.steps.push_back(std::move(step));
  }
  if (!have_header) return InvalidArgumentError(path + ": an empty step log");
  return log;
}

}  // namespace kvserve::cost

#include "trace/trace.h"

#include <climits>
#include <cmath>
#include <fstream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/str_format.h"

namespace kvserve {

StatusOr<std::vector<TraceRequest>> ParseMooncakeTrace(std::string_view text,
                                                       int64_t hash_block_tokens) {
  if (hash_block_tokens < 1) return InvalidArgumentError("hash block tokens must be positive");
  const int64_t h = hash_block_tokens;
  const int64_t max_id = (int64_t{INT32_MAX} - (h - 1)) / h;
  std::vector<TraceRequest> out;
  int64_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    auto error = [&](const std::string& what) {
      return InvalidArgumentError(StrFormat("trace line %lld: ", static_cast<long long>(line_no)) +
                                  what);
    };
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return error("not a JSON object");
    auto int_field = [&](const char* name, int64_t min, int64_t* value) -> Status {
      auto it = j.find(name);
      if (it == j.end()) return error(std::string("missing \"") + name + "\"");
      if (!it->is_number_integer()) return error(std::string("\"") + name + "\" is not an integer");
      *value = it->get<int64_t>();
      if (*value < min) {
        return error(std::string("\"") + name + "\" is below " + std::to_string(min));
      }
      return OkStatus();
    };
    TraceRequest r;
    auto ts = j.find("timestamp");
    if (ts == j.end()) return error("missing \"timestamp\"");
    if (!ts->is_number() || !std::isfinite(ts->get<double>())) {
      return error("\"timestamp\" is not a number");
    }
    r.timestamp_ms = ts->get<double>();
    if (r.timestamp_ms < 0) return error("\"timestamp\" is below 0");
    KV_RETURN_IF_ERROR(int_field("input_length", 1, &r.input_tokens));
    KV_RETURN_IF_ERROR(int_field("output_length", 0, &r.output_tokens));
    auto ids = j.find("hash_ids");
    if (ids == j.end() || !ids->is_array() || ids->empty()) {
      return error("\"hash_ids\" must be a non-empty array");
    }
    r.hash_ids.reserve(ids->size());
    for (const auto& id : *ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0) {
        return error("hash ids must be non-negative integers");
      }
      if (id.get<int64_t>() > max_id) {
        return error(StrFormat("hash id %lld too large for int32 token ids at %lld tokens per "
                               "hash block",
                               static_cast<long long>(id.get<int64_t>()),
                               static_cast<long long>(h)));
      }
      r.hash_ids.push_back(id.get<int64_t>());
    }
    const int64_t n = static_cast<int64_t>(r.hash_ids.size());
    if (r.input_tokens <= (n - 1) * h || r.input_tokens > n * h) {
      return error(StrFormat("input_length %lld does not fit %lld hash blocks of %lld tokens",
                             static_cast<long long>(r.input_tokens), static_cast<long long>(n),
                             static_cast<long long>(h)));
    }
    out.push_back(std::move(r));
  }
  if (out.empty()) return InvalidArgumentError("the trace has no requests");
  return out;
}

StatusOr<std::vector<TraceRequest>> LoadMooncakeTrace(const std::string& path,
                                                      int64_t hash_block_tokens) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open trace " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return DataLossError("cannot read trace " + path);
  StatusOr<std::vector<TraceRequest>> trace = ParseMooncakeTrace(ss.str(), hash_block_tokens);
  if (!trace.ok()) return trace.status().WithContext(path);
  return trace;
}

}  // namespace kvserve

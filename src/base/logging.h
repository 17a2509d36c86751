// Minimal leveled logging to stderr: KV_LOG(INFO) << "loaded " << n << " tensors";
// Thread-safe: each statement is written with one fwrite. Level from KVSERVE_LOG_LEVEL
// (debug, info, warning, error; default info) or set_log_level().
#pragma once

#include <sstream>

namespace kvserve {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();

namespace internal {
class LogMessage {
 public:
  LogMessage(LogLevel level) : level_(level) {}
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
}  // namespace internal
}  // namespace kvserve

#define KV_LOG_LEVEL_DEBUG ::kvserve::LogLevel::kDebug
#define KV_LOG_LEVEL_INFO ::kvserve::LogLevel::kInfo
#define KV_LOG_LEVEL_WARNING ::kvserve::LogLevel::kWarning
#define KV_LOG_LEVEL_ERROR ::kvserve::LogLevel::kError
#define KV_LOG(level)                                              \
  if (KV_LOG_LEVEL_##level < ::kvserve::log_level()) {             \
  } else                                                           \
    ::kvserve::internal::LogMessage(KV_LOG_LEVEL_##level).stream()

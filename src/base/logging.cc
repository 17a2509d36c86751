#include "base/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kvserve {
namespace {

LogLevel LevelFromEnv() {
  const char* env = std::getenv("KVSERVE_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "warning") == 0) return LogLevel::kWarning;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int>& LevelStorage() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnv())};
  return level;
}

}  // namespace

void set_log_level(LogLevel level) { LevelStorage().store(static_cast<int>(level)); }
LogLevel log_level() { return static_cast<LogLevel>(LevelStorage().load()); }

namespace internal {
LogMessage::~LogMessage() {
  static const char* kNames[] = {"D", "I", "W", "E"};
  std::string line = std::string(kNames[static_cast<int>(level_)]) + " " + stream_.str() + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}
}  // namespace internal
}  // namespace kvserve

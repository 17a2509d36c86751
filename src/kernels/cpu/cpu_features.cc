#include "kernels/cpu/cpu_features.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace kvserve::kernels::internal {
namespace {

// Whether the environment switch `name` is on: set, non-empty and not "0".
bool EnvSwitchOn(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
}

SimdLevel Detect() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))) {
    return SimdLevel::kScalar;
  }
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni")) {
    return SimdLevel::kAvx512Vnni;
  }
  return SimdLevel::kAvx2;
#else
  return SimdLevel::kScalar;
#endif
}

struct InitialChoice {
  SimdLevel level;
  std::string note;
};

// KVSERVE_NO_SIMD=1 (the older switch) means scalar; KVSERVE_SIMD names a level, never above
// the CPU's.
InitialChoice ChooseInitialLevel() {
  const SimdLevel detected = DetectedSimdLevel();
  if (EnvSwitchOn("KVSERVE_NO_SIMD")) {
    return {SimdLevel::kScalar, ""};
  }
  const char* env = std::getenv("KVSERVE_SIMD");
  if (env == nullptr || env[0] == '\0') return {detected, ""};
  const std::optional<SimdLevel> asked = ParseSimdLevel(env);
  if (!asked.has_value()) {
    return {detected, std::string("KVSERVE_SIMD=") + env +
                          " is not one of scalar, avx2, avx512: using " +
                          SimdLevelName(detected)};
  }
  if (static_cast<int>(*asked) > static_cast<int>(detected)) {
    return {detected, std::string("KVSERVE_SIMD=") + env + ": this CPU has " +
                          SimdLevelName(detected) + " at most: using " + SimdLevelName(detected)};
  }
  return {*asked, ""};
}

const InitialChoice& Initial() {
  static const InitialChoice choice = ChooseInitialLevel();
  return choice;
}

std::atomic<int>& LevelSlot() {
  static std::atomic<int> level{static_cast<int>(Initial().level)};
  return level;
}

}  // namespace

SimdLevel DetectedSimdLevel() {
  static const SimdLevel detected = Detect();
  return detected;
}

SimdLevel CurrentSimdLevel() {
  return static_cast<SimdLevel>(LevelSlot().load(std::memory_order_relaxed));
}

const char* SimdLevelName(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar: return "scalar";
    case SimdLevel::kAvx2: return "avx2";
    case SimdLevel::kAvx512Vnni: return "avx512";
  }
  return "?";
}

std::optional<SimdLevel> ParseSimdLevel(std::string_view name) {
  if (name == "scalar") return SimdLevel::kScalar;
  if (name == "avx2") return SimdLevel::kAvx2;
  if (name == "avx512" || name == "avx512vnni") return SimdLevel::kAvx512Vnni;
  return std::nullopt;
}

const std::string& SimdLevelNote() { return Initial().note; }

namespace {
bool CpuHasAvx512Bf16() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

std::atomic<bool>& Bf16DotSlot() {
  static std::atomic<bool> enabled{!EnvSwitchOn("KVSERVE_NO_BF16_DOT")};
  return enabled;
}
}  // namespace

bool UseAvx512Bf16Dot() {
  static const bool cpu_has = CpuHasAvx512Bf16();
  return cpu_has && CurrentSimdLevel() == SimdLevel::kAvx512Vnni &&
         Bf16DotSlot().load(std::memory_order_relaxed);
}

bool SetAvx512Bf16DotForTesting(bool enabled) { return Bf16DotSlot().exchange(enabled); }

namespace {
std::atomic<bool>& F16AsBf16Slot() {
  static std::atomic<bool> enabled{EnvSwitchOn("KVSERVE_F16_AS_BF16")};
  return enabled;
}
}  // namespace

bool PackF16AsBf16() {
  static const bool cpu_has = CpuHasAvx512Bf16();
  return cpu_has && CurrentSimdLevel() == SimdLevel::kAvx512Vnni &&
         F16AsBf16Slot().load(std::memory_order_relaxed);
}

bool SetF16AsBf16ForTesting(bool enabled) { return F16AsBf16Slot().exchange(enabled); }

SimdLevel SetSimdLevelForTesting(SimdLevel level) {
  int clamped = std::min(static_cast<int>(level), static_cast<int>(DetectedSimdLevel()));
  return static_cast<SimdLevel>(LevelSlot().exchange(clamped));
}

}  // namespace kvserve::kernels::internal

#include "kernels/cpu/cpu_features.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace kvserve::kernels::internal {
namespace {

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

SimdLevel InitialLevel() {
  const char* env = std::getenv("KVSERVE_NO_SIMD");
  if (env != nullptr && env[0] != '\0' && std::strcmp(env, "0") != 0) return SimdLevel::kScalar;
  return DetectedSimdLevel();
}

std::atomic<int>& LevelSlot() {
  static std::atomic<int> level{static_cast<int>(InitialLevel())};
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

SimdLevel SetSimdLevelForTesting(SimdLevel level) {
  int clamped = std::min(static_cast<int>(level), static_cast<int>(DetectedSimdLevel()));
  return static_cast<SimdLevel>(LevelSlot().exchange(clamped));
}

}  // namespace kvserve::kernels::internal

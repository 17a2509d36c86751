// Run-time CPU feature selection for the kernels in this folder. Internal to kernels/cpu.
// Thread-safety: the feature flags are read with relaxed atomics; SetSimdModeForTesting may be
// called only while no kernel is running (tests call it between cases).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kvserve::kernels::internal {

enum class SimdLevel {
  kScalar,      // portable C++ (also KVSERVE_SIMD=scalar or KVSERVE_NO_SIMD=1)
  kAvx2,        // AVX2 + FMA + F16C
  kAvx512Vnni,  // kAvx2 plus AVX-512 F/BW/VL/VNNI (256-bit VNNI dot products, 32 registers)
};

// The level in use: the best the CPU supports unless KVSERVE_SIMD (or KVSERVE_NO_SIMD=1) asked
// for a lower one at start-up.
SimdLevel CurrentSimdLevel();
// The best level this CPU supports, ignoring the environment and overrides.
SimdLevel DetectedSimdLevel();
// "scalar", "avx2", "avx512".
const char* SimdLevelName(SimdLevel level);
// KVSERVE_SIMD's values: "scalar", "avx2", "avx512" (also "avx512vnni"); nullopt otherwise.
std::optional<SimdLevel> ParseSimdLevel(std::string_view name);
// What start-up did with KVSERVE_SIMD when it did not simply get its way: an unknown value, or a
// level above the CPU's (clamped); empty otherwise.
const std::string& SimdLevelNote();
// Forces a level (clamped to DetectedSimdLevel()); returns the previous one.
SimdLevel SetSimdLevelForTesting(SimdLevel level);

}  // namespace kvserve::kernels::internal

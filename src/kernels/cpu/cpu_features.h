// Run-time CPU feature selection for the kernels in this folder. Internal to kernels/cpu.
// Thread-safety: the feature flags are read with relaxed atomics; SetSimdModeForTesting may be
// called only while no kernel is running (tests call it between cases).
#pragma once

namespace kvserve::kernels::internal {

enum class SimdLevel {
  kScalar,      // portable C++ (also forced by KVSERVE_NO_SIMD=1)
  kAvx2,        // AVX2 + FMA + F16C
  kAvx512Vnni,  // kAvx2 plus AVX-512 F/BW/VL/VNNI (256-bit VNNI dot products, 32 registers)
};

// The level in use: the best the CPU supports unless forced lower.
SimdLevel CurrentSimdLevel();
// The best level this CPU supports, ignoring KVSERVE_NO_SIMD and overrides.
SimdLevel DetectedSimdLevel();
// Forces a level (clamped to DetectedSimdLevel()); returns the previous one.
SimdLevel SetSimdLevelForTesting(SimdLevel level);

}  // namespace kvserve::kernels::internal

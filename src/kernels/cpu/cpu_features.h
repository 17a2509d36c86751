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

// Whether bf16 weights take vdpbf16ps (activations rounded to bf16 pairs, as llama.cpp does for
// bf16 weights): at the avx512 level on a CPU with AVX512_BF16 (Zen 4, Sapphire Rapids), unless
// KVSERVE_NO_BF16_DOT=1 or a test turned it off. Otherwise bf16 weights are widened to f32.
bool UseAvx512Bf16Dot();
// Turns the bf16 dot product off (false) or back on where the CPU has it; returns the previous
// value of the switch.
bool SetAvx512Bf16DotForTesting(bool enabled);

// Whether f16 weights are packed at load as bf16 panels (rounded to nearest even) and run on the
// bf16 kernels (vdpbf16ps): opt-in with KVSERVE_F16_AS_BF16=1, and only at the avx512 level on a
// CPU with AVX512_BF16. It trades precision for speed as ik_llama.cpp's `-rtr` does on Zen 4
// (its PR #174): bf16 keeps f16's range but 8 bits of mantissa instead of 11. The packed layout
// belongs to the value in force when it was made (read at pack time and at every matmul), like
// the level: tests that switch it pack again.
bool PackF16AsBf16();
// Sets the KVSERVE_F16_AS_BF16 switch; returns the previous value.
bool SetF16AsBf16ForTesting(bool enabled);

}  // namespace kvserve::kernels::internal

// This machine's ceilings, the figures benchmarks and the cost model state kernels against:
// memory read bandwidth (a STREAM-like sum over a buffer much larger than the caches), f32 FMA
// throughput and int8 dot-product throughput (the instructions the int8 weight kernels use at
// the SIMD level in force: AVX-512 VNNI, else AVX2 maddubs/madd), each on every thread of a
// pool. Each measurement runs `repetitions` times; the best (the least disturbed on a shared
// machine) and the median are reported.
//
// Thread-safety: plain functions; each uses the pool it is given for its whole run.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"

namespace kvserve::kernels {

struct CeilingMeasurement {
  double best = 0.0;    // per second: bytes, or operations (2 per multiply-add)
  double median = 0.0;
  int repetitions = 0;
};

// Bytes per second summing a buffer of `buffer_bytes` split over the pool's threads (after
// one warm-up pass; the buffer is first touched by the threads that read it).
CeilingMeasurement MeasureReadBandwidth(ThreadPool* pool, int64_t buffer_bytes, int repetitions);

// f32 FMA operations per second at the kernels' SIMD level: 12 independent FMA chains per
// thread, 16-wide at the AVX-512 level (full rate on Zen 5, half on Zen 4's 256-bit units),
// 8-wide at AVX2, scalar below. Also the same rate per CPU-second the process got (robust to time-sharing).
CeilingMeasurement MeasureFmaPeak(ThreadPool* pool, int repetitions,
                                  double* per_cpu_second_median = nullptr);

// int8 x int8 multiply-adds (counted as 2 operations) per second at the kernels' SIMD level:
// 12 independent 512-bit VNNI dot-product chains (AVX-512 VNNI level), else maddubs + madd pairs
// (AVX2), else 0 (scalar: the int8 kernels do not exist there).
CeilingMeasurement MeasureInt8DotPeak(ThreadPool* pool, int repetitions);

// bf16 x bf16 multiply-adds into f32 (counted as 2 operations) per second through vdpbf16ps:
// 12 independent 512-bit chains of 32 multiply-adds each, where the bf16 weight kernels use it
// (the avx512 level on a CPU with AVX512_BF16, kernels: UseAvx512Bf16Dot); else 0. The
// ceiling of bf16 weights, and of f16 weights under KVSERVE_F16_AS_BF16=1.
CeilingMeasurement MeasureBf16DotPeak(ThreadPool* pool, int repetitions);

}  // namespace kvserve::kernels

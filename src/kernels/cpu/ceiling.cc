// The machine's ceilings (see kernels/ceiling.h).
#include "kernels/ceiling.h"

#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_features.h"

namespace kvserve::kernels {
namespace {

using Clock = std::chrono::steady_clock;
using internal::SimdLevel;

__attribute__((target("avx2,fma"))) float SumRangeAvx2(const float* p, int64_t n) {
  __m256 acc[8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
#pragma GCC unroll 8
    for (int u = 0; u < 8; ++u) acc[u] = _mm256_add_ps(acc[u], _mm256_loadu_ps(p + i + 8 * u));
  }
  for (int u = 1; u < 8; ++u) acc[0] = _mm256_add_ps(acc[0], acc[u]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc[0]);
  float s = 0;
  for (float v : lanes) s += v;
  for (; i < n; ++i) s += p[i];
  return s;
}

float SumRangeScalar(const float* p, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int u = 0; u < 8; ++u) acc[u] += p[i + u];
  }
  float s = 0;
  for (float v : acc) s += v;
  for (; i < n; ++i) s += p[i];
  return s;
}

// Operations done: 2 per lane per FMA.
__attribute__((target("avx2,fma"))) double FmaLoopAvx2(int64_t iterations, float seed, float* sink) {
  __m256 acc[12];
  for (int u = 0; u < 12; ++u) acc[u] = _mm256_set1_ps(seed + 0.001f * u);
  const __m256 a = _mm256_set1_ps(0.999999f);
  const __m256 b = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int u = 0; u < 12; ++u) acc[u] = _mm256_fmadd_ps(acc[u], a, b);
  }
  for (int u = 1; u < 12; ++u) acc[0] = _mm256_add_ps(acc[0], acc[u]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc[0]);
  *sink = lanes[0];
  return static_cast<double>(iterations) * 12 * 8 * 2;
}

double FmaLoopScalar(int64_t iterations, float seed, float* sink) {
  float acc[12];
  for (int u = 0; u < 12; ++u) acc[u] = seed + 0.001f * u;
  for (int64_t it = 0; it < iterations; ++it) {
    for (int u = 0; u < 12; ++u) acc[u] = acc[u] * 0.999999f + 1e-7f;
  }
  float s = 0;
  for (float v : acc) s += v;
  *sink = s;
  return static_cast<double>(iterations) * 12 * 2;
}

// The AVX-512 level's kernels use 512-bit registers: on Zen 4 a 512-bit op takes a 256-bit
// unit twice (the same rate as AVX2), on Zen 5 and Intel server cores it runs at full width
// (twice the AVX2 rate), so the level's ceilings are measured with the level's own width.
__attribute__((target("avx2,fma,avx512f"))) double FmaLoopAvx512(int64_t iterations, float seed,
                                                                 float* sink) {
  __m512 acc[12];
  for (int u = 0; u < 12; ++u) acc[u] = _mm512_set1_ps(seed + 0.001f * u);
  const __m512 a = _mm512_set1_ps(0.999999f);
  const __m512 b = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int u = 0; u < 12; ++u) acc[u] = _mm512_fmadd_ps(acc[u], a, b);
  }
  for (int u = 1; u < 12; ++u) acc[0] = _mm512_add_ps(acc[0], acc[u]);
  *sink = _mm512_reduce_add_ps(acc[0]);
  return static_cast<double>(iterations) * 12 * 16 * 2;
}

// 12 chains of 512-bit VNNI dot products: 64 int8 multiply-adds each.
__attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512vnni"))) double Int8LoopVnni(
    int64_t iterations, int seed, int* sink) {
  __m512i acc[12];
  for (int u = 0; u < 12; ++u) acc[u] = _mm512_set1_epi32(seed + u);
  const __m512i a = _mm512_set1_epi8(3);
  const __m512i b = _mm512_set1_epi8(-2);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int u = 0; u < 12; ++u) acc[u] = _mm512_dpbusd_epi32(acc[u], a, b);
  }
  for (int u = 1; u < 12; ++u) acc[0] = _mm512_add_epi32(acc[0], acc[u]);
  // The sums wrap by design (the loop only has to keep the units busy); _mm512_reduce_add_epi32
  // adds as signed int, which UBSan reports on overflow, so the lanes are added as unsigned.
  alignas(64) uint32_t lanes[16];
  _mm512_store_si512(lanes, acc[0]);
  uint32_t sum = 0;
  for (uint32_t v : lanes) sum += v;
  *sink = static_cast<int>(sum);
  return static_cast<double>(iterations) * 12 * 64 * 2;
}

// 12 chains of 512-bit vdpbf16ps: 32 bf16 multiply-adds each.
__attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512bf16"))) double Bf16LoopAvx512(
    int64_t iterations, float seed, float* sink) {
  __m512 acc[12];
  for (int u = 0; u < 12; ++u) acc[u] = _mm512_set1_ps(seed + static_cast<float>(u));
  // 1.0 and a tiny factor (bf16 0x3f80, 0x3380): the sums stay finite over any run.
  const __m512i a_bits = _mm512_set1_epi16(static_cast<short>(0x3f80));
  const __m512i b_bits = _mm512_set1_epi16(static_cast<short>(0x3380));
  const __m512bh a = reinterpret_cast<const __m512bh&>(a_bits);
  const __m512bh b = reinterpret_cast<const __m512bh&>(b_bits);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int u = 0; u < 12; ++u) acc[u] = _mm512_dpbf16_ps(acc[u], a, b);
  }
  for (int u = 1; u < 12; ++u) acc[0] = _mm512_add_ps(acc[0], acc[u]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc[0]);
  float sum = 0.0f;
  for (float v : lanes) sum += v;
  *sink = sum;
  return static_cast<double>(iterations) * 12 * 32 * 2;
}

// 12 chains of maddubs (u8 x s8 -> s16 pairs) + madd (-> s32) + add: 32 multiply-adds each.
__attribute__((target("avx2"))) double Int8LoopAvx2(int64_t iterations, int seed, int* sink) {
  __m256i acc[12];
  for (int u = 0; u < 12; ++u) acc[u] = _mm256_set1_epi32(seed + u);
  const __m256i a = _mm256_set1_epi8(3);
  const __m256i b = _mm256_set1_epi8(-2);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int u = 0; u < 12; ++u) {
      acc[u] = _mm256_add_epi32(acc[u], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
    }
  }
  for (int u = 1; u < 12; ++u) acc[0] = _mm256_add_epi32(acc[0], acc[u]);
  *sink = _mm256_extract_epi32(acc[0], 0);
  return static_cast<double>(iterations) * 12 * 32 * 2;
}

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

CeilingMeasurement Summarize(std::vector<double> values) {
  CeilingMeasurement m;
  m.repetitions = static_cast<int>(values.size());
  if (values.empty()) return m;
  std::sort(values.begin(), values.end());
  m.best = values.back();
  m.median = values[values.size() / 2];
  return m;
}

double MedianOf(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

CeilingMeasurement MeasureReadBandwidth(ThreadPool* pool, int64_t buffer_bytes, int repetitions) {
  const int threads = pool->num_threads();
  const int64_t n = std::max<int64_t>(1 << 16, buffer_bytes / 4);
  std::vector<float> buffer(static_cast<size_t>(n));
  const bool avx2 = internal::CurrentSimdLevel() != SimdLevel::kScalar;
  const int64_t per_thread = (n + threads - 1) / threads;
  auto run = [&](float* sums) {
    pool->RunOnAll([&](int t) {
      const int64_t b = std::min(n, t * per_thread), e = std::min(n, b + per_thread);
      if (sums == nullptr) {  // first touch
        for (int64_t i = b; i < e; ++i) buffer[i] = static_cast<float>(i & 1023) * 1e-3f;
        return;
      }
      sums[t] += avx2 ? SumRangeAvx2(buffer.data() + b, e - b) : SumRangeScalar(buffer.data() + b, e - b);
    });
  };
  run(nullptr);
  std::vector<float> sums(static_cast<size_t>(threads));
  std::vector<double> rates;
  for (int r = 0; r <= repetitions; ++r) {
    const auto start = Clock::now();
    run(sums.data());
    const double s = Seconds(start);
    if (r > 0) rates.push_back(static_cast<double>(n) * 4 / s);  // r = 0 warms up
  }
  volatile float keep = sums[0];
  (void)keep;
  return Summarize(rates);
}

CeilingMeasurement MeasureFmaPeak(ThreadPool* pool, int repetitions, double* per_cpu_second_median) {
  const SimdLevel level = internal::CurrentSimdLevel();
  const bool avx2 = level != SimdLevel::kScalar;
  const int64_t iterations = avx2 ? 20'000'000 : 5'000'000;
  std::vector<float> sinks(static_cast<size_t>(pool->num_threads()));
  std::vector<double> rates, per_cpu;
  for (int r = 0; r < repetitions; ++r) {
    std::vector<double> ops(static_cast<size_t>(pool->num_threads()));
    const auto start = Clock::now();
    const double cpu_start = ProcessCpuSeconds();
    pool->RunOnAll([&](int t) {
      ops[t] = level == SimdLevel::kAvx512Vnni ? FmaLoopAvx512(iterations, 1.0f + t, &sinks[t])
               : avx2                           ? FmaLoopAvx2(iterations, 1.0f + t, &sinks[t])
                                                : FmaLoopScalar(iterations, 1.0f + t, &sinks[t]);
    });
    const double s = Seconds(start);
    double total = 0;
    for (double o : ops) total += o;
    rates.push_back(total / s);
    per_cpu.push_back(total / (ProcessCpuSeconds() - cpu_start));
  }
  if (per_cpu_second_median != nullptr) *per_cpu_second_median = MedianOf(per_cpu);
  return Summarize(rates);
}

namespace {
// Operations per second of `loop(t)` (each thread t's operation count) run on every thread of
// the pool, `repetitions` times.
template <class Loop>
CeilingMeasurement MeasureOnAllThreads(ThreadPool* pool, int repetitions, Loop loop) {
  std::vector<double> rates;
  for (int r = 0; r < repetitions; ++r) {
    std::vector<double> ops(static_cast<size_t>(pool->num_threads()));
    const auto start = Clock::now();
    pool->RunOnAll([&](int t) { ops[t] = loop(t); });
    const double s = Seconds(start);
    double total = 0;
    for (double o : ops) total += o;
    rates.push_back(total / s);
  }
  return Summarize(rates);
}
}  // namespace

CeilingMeasurement MeasureInt8DotPeak(ThreadPool* pool, int repetitions) {
  const SimdLevel level = internal::CurrentSimdLevel();
  if (level == SimdLevel::kScalar) return {};
  std::vector<int> sinks(static_cast<size_t>(pool->num_threads()));
  const int64_t iterations = 10'000'000;
  return MeasureOnAllThreads(pool, repetitions, [&](int t) {
    return level == SimdLevel::kAvx512Vnni ? Int8LoopVnni(iterations, t, &sinks[t])
                                           : Int8LoopAvx2(iterations, t, &sinks[t]);
  });
}

CeilingMeasurement MeasureBf16DotPeak(ThreadPool* pool, int repetitions) {
  if (!internal::UseAvx512Bf16Dot()) return {};
  std::vector<float> sinks(static_cast<size_t>(pool->num_threads()));
  const int64_t iterations = 10'000'000;
  return MeasureOnAllThreads(pool, repetitions, [&](int t) {
    return Bf16LoopAvx512(iterations, 1.0f + static_cast<float>(t), &sinks[t]);
  });
}

}  // namespace kvserve::kernels

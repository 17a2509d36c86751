// Measures this machine's ceilings for the kernels: memory read bandwidth (STREAM-like sum over
// a large buffer) and f32 FMA peak (AVX2 FMA loop with independent accumulators), both with N
// threads. Benchmarks state their results as fractions of these numbers.
//
//   ceiling [--threads N] [--format json|text] [--buffer_mib MIB] [--repetitions R]
//
// Read bandwidth: the buffer is split evenly over the threads; each pass sums it with AVX2 (8
// accumulators); the reported value is the BEST of R passes (the machine is shared, so the best
// is the least disturbed one); the median is printed too. FMA: each thread runs a loop of 12
// independent 8-wide FMA chains; best of R. fma_gflops_per_cpu_second (median) divides by the
// CPU time the process actually got, i.e. the per-core rate when the machine is time-shared.
#include <immintrin.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;

__attribute__((target("avx2,fma"))) float SumRange(const float* p, int64_t n) {
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

// Returns the number of flops done (2 per lane per FMA).
__attribute__((target("avx2,fma"))) double FmaLoop(int64_t iterations, float seed, float* sink) {
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

// CPU seconds used by the whole process (all threads).
double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = kvserve::ThreadPool::HardwareThreads();
  std::string format = "json";
  int64_t buffer_mib = 1024;
  int repetitions = 7;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value for %s\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--threads") {
      threads = std::atoi(value().c_str());
    } else if (arg == "--format") {
      format = value();
    } else if (arg == "--buffer_mib") {
      buffer_mib = std::atoll(value().c_str());
    } else if (arg == "--repetitions") {
      repetitions = std::atoi(value().c_str());
    } else {
      std::fprintf(stderr,
                   "usage: ceiling [--threads N] [--format json|text] [--buffer_mib MIB] "
                   "[--repetitions R]\n");
      return 2;
    }
  }
  if (threads < 1 || buffer_mib < 1 || repetitions < 1 || (format != "json" && format != "text")) {
    std::fprintf(stderr, "bad arguments\n");
    return 2;
  }
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::fprintf(stderr, "ceiling needs AVX2 + FMA\n");
    return 1;
  }
  kvserve::ThreadPool pool(threads);

  // Read bandwidth.
  const int64_t num_floats = buffer_mib * (1 << 20) / 4;
  std::vector<float> buffer(num_floats);
  pool.ParallelFor(num_floats, 1 << 16, [&](int64_t b, int64_t e) {  // first touch per thread
    for (int64_t i = b; i < e; ++i) buffer[i] = static_cast<float>(i & 1023) * 1e-3f;
  });
  std::vector<double> bandwidths;
  std::vector<float> sums(threads);
  for (int r = 0; r < repetitions + 1; ++r) {
    auto start = Clock::now();
    pool.ParallelFor(num_floats, 1 << 16, [&](int64_t b, int64_t e) {
      sums[b / ((num_floats + threads - 1) / threads) % threads] += SumRange(buffer.data() + b, e - b);
    });
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (r > 0) bandwidths.push_back(static_cast<double>(num_floats) * 4 / seconds / 1e9);  // r=0 warms up
  }
  std::vector<float>().swap(buffer);

  // FMA peak.
  std::vector<double> gflops;
  std::vector<double> gflops_per_cpu_second;  // per core, robust to time-sharing
  std::vector<float> sinks(threads);
  const int64_t iterations = 20'000'000;
  for (int r = 0; r < repetitions; ++r) {
    std::vector<double> flops(threads);
    auto start = Clock::now();
    double cpu_start = ProcessCpuSeconds();
    pool.RunOnAll([&](int t) { flops[t] = FmaLoop(iterations, 1.0f + t, &sinks[t]); });
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    double total = 0;
    for (double f : flops) total += f;
    gflops.push_back(total / seconds / 1e9);
    gflops_per_cpu_second.push_back(total / (ProcessCpuSeconds() - cpu_start) / 1e9);
  }

  double bw_best = *std::max_element(bandwidths.begin(), bandwidths.end());
  double fma_best = *std::max_element(gflops.begin(), gflops.end());
  if (format == "json") {
    std::printf(
        "{\"read_bandwidth_gbs\": %.2f, \"read_bandwidth_median_gbs\": %.2f, \"fma_gflops\": %.2f, "
        "\"fma_median_gflops\": %.2f, \"fma_gflops_per_cpu_second\": %.2f, \"threads\": %d, \"statistic\": \"best of %d\", "
        "\"buffer_mib\": %lld}\n",
        bw_best, Median(bandwidths), fma_best, Median(gflops), Median(gflops_per_cpu_second),
        threads, repetitions,
        static_cast<long long>(buffer_mib));
  } else {
    std::printf("threads: %d\nread bandwidth: best %.2f GB/s, median %.2f GB/s (%d passes over %lld MiB)\n"
                "f32 FMA (AVX2): best %.2f GFLOP/s, median %.2f GFLOP/s\n",
                threads, bw_best, Median(bandwidths), repetitions, static_cast<long long>(buffer_mib),
                fma_best, Median(gflops));
  }
  return 0;
}

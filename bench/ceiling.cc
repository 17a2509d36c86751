// Measures this machine's ceilings for the kernels (kernels/ceiling.h): memory read bandwidth
// (STREAM-like sum over a large buffer), f32 FMA peak, int8 dot-product peak (at the SIMD
// level in force) and bf16 dot-product peak (vdpbf16ps, where the kernels use it), all with N
// threads. Benchmarks state their results as fractions of these.
//
//   ceiling [--threads N] [--format json|text] [--buffer_mib MIB] [--repetitions R]
//
// Each figure is the BEST of R passes (the machine is shared, so the best is the least disturbed
// one); medians are printed too. fma_gflops_per_cpu_second (median) divides by the CPU time the
// process actually got, i.e. the per-core rate when the machine is time-shared.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/thread_pool.h"
#include "kernels/ceiling.h"
#include "kernels/kernels.h"

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
  kvserve::ThreadPool pool(threads);
  const kvserve::kernels::CeilingMeasurement bw =
      kvserve::kernels::MeasureReadBandwidth(&pool, buffer_mib << 20, repetitions);
  double fma_per_cpu = 0.0;
  const kvserve::kernels::CeilingMeasurement fma =
      kvserve::kernels::MeasureFmaPeak(&pool, repetitions, &fma_per_cpu);
  const kvserve::kernels::CeilingMeasurement int8 =
      kvserve::kernels::MeasureInt8DotPeak(&pool, repetitions);
  const kvserve::kernels::CeilingMeasurement bf16 =
      kvserve::kernels::MeasureBf16DotPeak(&pool, repetitions);
  if (format == "json") {
    std::printf(
        "{\"read_bandwidth_gbs\": %.2f, \"read_bandwidth_median_gbs\": %.2f, \"fma_gflops\": %.2f, "
        "\"fma_median_gflops\": %.2f, \"fma_gflops_per_cpu_second\": %.2f, \"int8_gops\": %.2f, "
        "\"int8_median_gops\": %.2f, \"bf16_dot_gflops\": %.2f, \"bf16_dot_median_gflops\": %.2f, "
        "\"simd_level\": \"%s\", \"threads\": %d, "
        "\"statistic\": \"best of %d\", \"buffer_mib\": %lld}\n",
        bw.best / 1e9, bw.median / 1e9, fma.best / 1e9, fma.median / 1e9, fma_per_cpu / 1e9,
        int8.best / 1e9, int8.median / 1e9, bf16.best / 1e9, bf16.median / 1e9,
        kvserve::kernels::SimdLevelName(), threads,
        repetitions, static_cast<long long>(buffer_mib));
  } else {
    std::printf("threads: %d (kernels: %s)\nread bandwidth: best %.2f GB/s, median %.2f GB/s (%d "
                "passes over %lld MiB)\nf32 FMA: best %.2f GFLOP/s, median %.2f GFLOP/s\n"
                "int8 dot: best %.2f GOP/s, median %.2f GOP/s\n"
                "bf16 dot (vdpbf16ps; 0 where the kernels do not use it): best %.2f GFLOP/s, "
                "median %.2f GFLOP/s\n",
                threads, kvserve::kernels::SimdLevelName(), bw.best / 1e9, bw.median / 1e9,
                repetitions, static_cast<long long>(buffer_mib), fma.best / 1e9, fma.median / 1e9,
                int8.best / 1e9, int8.median / 1e9, bf16.best / 1e9, bf16.median / 1e9);
  }
  return 0;
}

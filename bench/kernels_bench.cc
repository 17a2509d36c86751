// Matmul microbenchmarks on the shapes of smollm2-135m and llama-3.2-1b, per weight dtype,
// number of activation rows (1 = decode, 512 = prefill) and thread count. Counters:
//   weight_GBps   bytes of W read per second (decode is bound by memory bandwidth)
//   GFLOPs        2 * m * n * k per second (prefill is bound by FMA throughput)
// Compare with build/bench/ceiling --threads N. Other kernels (RmsNorm, Softmax, ...) are
// benchmarked at the end on model-sized vectors.
//   kernels_bench --benchmark_filter='Matmul/.*q8_0' --benchmark_min_time=0.3
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace kvserve {
namespace {

struct MatShape {
  const char* name;
  int64_t n;  // output features
  int64_t k;  // input features
  bool prefill;  // also benchmark m = 512
};

const MatShape kShapes[] = {
    {"smollm2_ffn_up", 1536, 576, true},     {"smollm2_ffn_down", 576, 1536, true},
    {"smollm2_lm_head", 49152, 576, false},  {"llama1b_attn_q", 2048, 2048, true},
    {"llama1b_ffn_up", 8192, 2048, true},    {"llama1b_ffn_down", 2048, 8192, false},
    {"llama1b_lm_head", 128256, 2048, false},
};

const Tensor& Weights(DType dtype, int64_t n, int64_t k) {
  static std::map<std::tuple<int, int64_t, int64_t>, Tensor> cache;
  auto key = std::make_tuple(static_cast<int>(dtype), n, k);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  Tensor w = Tensor::Allocate(dtype, {n, k});
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> row(k);
  for (int64_t j = 0; j < n; ++j) {
    for (auto& v : row) v = dist(rng);
    QuantizeRow(dtype, row.data(), static_cast<char*>(w.mutable_data()) + j * w.row_bytes(), k);
  }
  return cache.emplace(key, std::move(w)).first->second;
}

ThreadPool* Pool(int threads) {
  static std::map<int, std::unique_ptr<ThreadPool>> pools;
  auto& p = pools[threads];
  if (!p) p = std::make_unique<ThreadPool>(threads);
  return p.get();
}

void BM_Matmul(benchmark::State& state, MatShape shape, DType dtype, int64_t m, int threads) {
  const Tensor& w = Weights(dtype, shape.n, shape.k);
  std::vector<float> x(m * shape.k), y(m * shape.n);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& v : x) v = dist(rng);
  ThreadPool* pool = Pool(threads);
  for (auto _ : state) {
    kernels::Matmul(x.data(), m, w, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["weight_GBps"] = benchmark::Counter(
      static_cast<double>(w.num_bytes()) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOPs"] = benchmark::Counter(
      2.0 * m * shape.n * shape.k * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(std::string(kernels::SimdEnabled() ? "simd" : "scalar"));
}

void BM_RmsNorm(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> x(n, 0.5f), w(n, 1.0f), out(n);
  for (auto _ : state) {
    kernels::RmsNorm(x.data(), w.data(), 1, n, 1e-5f, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 4);
}
BENCHMARK(BM_RmsNorm)->Arg(576)->Arg(2048);

void BM_Softmax(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 17) * 0.1f;
  for (auto _ : state) {
    kernels::Softmax(x.data(), n);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 4);
}
BENCHMARK(BM_Softmax)->Arg(1024)->Arg(49152);

void BM_SwiGlu(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> g(n, 0.3f), u(n, 0.7f), out(n);
  for (auto _ : state) {
    kernels::SwiGlu(g.data(), u.data(), n, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 4);
}
BENCHMARK(BM_SwiGlu)->Arg(1536)->Arg(8192);

void BM_DenseAttention(benchmark::State& state) {
  kernels::AttentionShape s;
  s.num_queries = 1;
  s.num_keys = state.range(0);
  s.first_pos = s.num_keys - 1;
  s.num_heads = 32;
  s.num_kv_heads = 8;
  s.head_dim = 64;
  s.scale = 0.125f;
  std::vector<float> q(s.num_heads * 64, 0.1f), k(s.num_keys * 8 * 64, 0.2f),
      v(s.num_keys * 8 * 64, 0.3f), out(s.num_heads * 64);
  ThreadPool* pool = Pool(static_cast<int>(state.range(1)));
  for (auto _ : state) {
    kernels::DenseAttention(q.data(), k.data(), v.data(), s, out.data(), pool);
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_DenseAttention)->Args({1024, 1})->Args({1024, 2})->UseRealTime();

int RegisterMatmuls() {
  for (const MatShape& shape : kShapes) {
    for (DType dtype : {DType::kQ8_0, DType::kF16, DType::kBF16, DType::kF32}) {
      if (dtype == DType::kF32 && shape.n * shape.k > 8192 * 2048) continue;
      for (int64_t m : {int64_t{1}, int64_t{4}, int64_t{512}}) {
        if (m == 512 && !shape.prefill) continue;
        for (int threads : {1, 2}) {
          std::string name = std::string("Matmul/") + shape.name + "/" + DTypeName(dtype) +
                             "/m:" + std::to_string(m) + "/threads:" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, shape, dtype, m, threads)
              ->UseRealTime()
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
  return 0;
}
const int kRegistered = RegisterMatmuls();

}  // namespace
}  // namespace kvserve

BENCHMARK_MAIN();

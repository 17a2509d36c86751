// Matmul microbenchmarks on the shapes of smollm2-135m and llama-3.2-1b, per weight dtype,
// number of activation rows (1 = decode, 32 = batched decode of 32 sequences, 512 = prefill)
// and thread count. Counters:
//   weight_GBps   bytes of W read per second (decode is bound by memory bandwidth)
//   GFLOPs        2 * m * n * k per second (prefill is bound by FMA throughput)
// Compare with build/bench/ceiling --threads N. Other kernels (RmsNorm, Softmax, ...) are
// benchmarked at the end on model-sized vectors.
//   kernels_bench --benchmark_filter='Matmul/.*q8_0' --benchmark_min_time=0.3
// The GGML 2- to 6-bit types (q4_0 ... q6_k) run on llama1b_attn_q and llama1b_ffn_up with
// m = 1, 4, 64, on random blocks:
//   kernels_bench --benchmark_filter='Matmul/llama1b_attn_q/q4_k'
// PagedDecode/<geometry>/<kv dtype>/ctx:N/threads:T: decode attention (one query token) of one
// sequence over N cached tokens in 16-token blocks at shuffled block ids, one layer. Counter:
//   kv_GBps   bytes of K and V (plus int8 slot scales / fp8 head scales) read per second
//   kernels_bench --benchmark_filter='PagedDecode' --benchmark_min_time=0.1
// PagedDecodeBatch/...: one batched decode step's attention over 30 layers for 32 sequences
// of 320 tokens (smollm2-135m geometry), KV laid out as the engine allocates it; kv_GBps as
// above, per step.
// PagedPrefill/<geometry>/<kv dtype>/tokens:N/threads:T: causal prefill attention of one
// sequence's N-token prompt over its own keys (as `generate --random-prompt-tokens N` runs it
// in each layer), one layer. Counter:
//   GFLOPs    4 * head_dim * num_heads * (keys each query sees, summed) per second
//   kernels_bench --benchmark_filter='PagedPrefill' --benchmark_min_time=0.3
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "base/system_memory.h"
#include "base/thread_pool.h"
#include "kernels/cpu/quant_weights_test_util.h"
#include "kernels/kernels.h"
#include "kernels/paged_attention.h"
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

Tensor MakeWeights(DType dtype, int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  if (IsGgmlBlockType(dtype) && dtype != DType::kQ8_0) {  // no quantizer: random blocks
    Tensor w = RandomGgmlWeights(dtype, n, k, rng);
    w.packed = kernels::PackMatmulWeights(w);
    return w;
  }
  Tensor w = Tensor::Allocate(dtype, {n, k});
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> row(k);
  for (int64_t j = 0; j < n; ++j) {
    for (auto& v : row) v = dist(rng);
    QuantizeRow(dtype, row.data(), static_cast<char*>(w.mutable_data()) + j * w.row_bytes(), k);
  }
  w.packed = kernels::PackMatmulWeights(w);  // as LlamaModel does at load
  return w;
}

const Tensor& Weights(DType dtype, int64_t n, int64_t k) {
  static std::map<std::tuple<int, int64_t, int64_t>, Tensor> cache;
  auto key = std::make_tuple(static_cast<int>(dtype), n, k);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  return cache.emplace(key, MakeWeights(dtype, n, k, 42)).first->second;
}

// Copies of one shape's weights, at least 256 MB in all: run one after another, each comes from
// DRAM, as every matrix of a model larger than the caches does in decode.
constexpr int64_t kColdBytes = int64_t{256} << 20;
// Only the last shape and dtype asked for are kept.
const std::vector<Tensor>& ColdWeights(DType dtype, int64_t n, int64_t k) {
  static std::tuple<int, int64_t, int64_t> cached_key;
  static std::vector<Tensor> copies;
  auto key = std::make_tuple(static_cast<int>(dtype), n, k);
  if (key == cached_key && !copies.empty()) return copies;
  copies.clear();
  cached_key = key;
  int64_t bytes = 0;
  for (uint32_t seed = 42; copies.empty() || bytes < kColdBytes; ++seed) {
    copies.push_back(MakeWeights(dtype, n, k, seed));
    bytes += copies.back().num_bytes();
  }
  return copies;
}

ThreadPool* Pool(int threads) {
  static std::map<int, std::unique_ptr<ThreadPool>> pools;
  auto& p = pools[threads];
  if (!p) p = std::make_unique<ThreadPool>(threads);
  return p.get();
}

// Decode (m = 1) of one shape from DRAM: the copies of ColdWeights in turn.
void BM_MatmulCold(benchmark::State& state, MatShape shape, DType dtype, int threads) {
  const std::vector<Tensor>& copies = ColdWeights(dtype, shape.n, shape.k);
  std::vector<float> x(shape.k), y(shape.n);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& v : x) v = dist(rng);
  ThreadPool* pool = Pool(threads);
  size_t next = 0;
  for (auto _ : state) {
    kernels::Matmul(x.data(), 1, copies[next], y.data(), pool);
    next = (next + 1) % copies.size();
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["weight_GBps"] =
      benchmark::Counter(static_cast<double>(copies[0].num_bytes()) * state.iterations() / 1e9,
                         benchmark::Counter::kIsRate);
  state.SetLabel(std::string(kernels::SimdEnabled() ? "simd" : "scalar"));
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
      for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{32}, int64_t{512}}) {
        if (m == 512 && !shape.prefill) continue;
        if ((m == 2 || m == 32) && dtype != DType::kQ8_0) continue;  // Q8_0 only
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
  // The GGML 2- to 6-bit types: decode (1, 4 rows) and prefill (64) on two llama-1b shapes
  // (from cache: 4-14 MB), and decode from DRAM on the 1B's output matrix (128256 x 2048).
  // Their scalar fallback (KVSERVE_NO_SIMD=1) is the "before" of issue 22.
  for (const MatShape& shape : {kShapes[3], kShapes[4], kShapes[6]}) {
    for (DType dtype : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K,
                        DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
      for (int64_t m : {int64_t{1}, int64_t{4}, int64_t{64}}) {
        if (shape.n == 128256 && m != 1) continue;
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
  // Decode from DRAM on the 1B's layer shapes (MatmulCold/...; the lm_head rows above are
  // cold by size alone).
  for (const MatShape& shape : {kShapes[3], kShapes[4], kShapes[5]}) {
    for (DType dtype : {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ4_K, DType::kQ6_K,
                        DType::kBF16}) {
      for (int threads : {1, 2}) {
        std::string name = std::string("MatmulCold/") + shape.name + "/" + DTypeName(dtype) +
                           "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), BM_MatmulCold, shape, dtype, threads)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  return 0;
}
const int kRegistered = RegisterMatmuls();

struct AttnGeometry {
  const char* name;
  int64_t num_heads;
  int64_t num_kv_heads;
  int64_t head_dim;
};

const AttnGeometry kAttnGeometries[] = {
    {"smollm2_135m", 9, 3, 64},   // 9 query heads, 3 KV heads
    {"llama", 32, 8, 128},        // Llama-3-8B-like
};

// One layer's paged KV for one sequence (the last one built is kept: registrations for the
// same geometry, dtype and context run back to back).
struct PagedKvData {
  // [num_blocks, 16, num_kv_heads, head_dim], allocated as the engine's KvStorage allocates
  // its pages (huge pages where the kernel allows).
  struct Buffer {
    std::unique_ptr<uint8_t, decltype(&std::free)> ptr{nullptr, &std::free};
    uint8_t* data() const { return ptr.get(); }
    void resize(int64_t n) { ptr.reset(static_cast<uint8_t*>(AllocateLargeBuffer(n))); }
  };
  Buffer k, v;
  std::vector<float> head_scales;             // fp8: [num_kv_heads]
  std::vector<float> token_scales;            // int8: [num_blocks * 16, num_kv_heads]
  std::vector<int32_t> block_table;
  kernels::PagedKv kv;
  int64_t bytes_read = 0;                     // per attention call
};

const PagedKvData& PagedData(const AttnGeometry& geo, DType dtype, int64_t context) {
  static std::tuple<const char*, int, int64_t> key{nullptr, 0, 0};
  static std::unique_ptr<PagedKvData> data;
  auto wanted = std::make_tuple(geo.name, static_cast<int>(dtype), context);
  if (data && key == wanted) return *data;
  data.reset();  // free the previous one first
  data = std::make_unique<PagedKvData>();
  key = wanted;
  constexpr int64_t kBlockSize = 16;
  const int64_t num_blocks = (context + kBlockSize - 1) / kBlockSize;
  const int64_t values = num_blocks * kBlockSize * geo.num_kv_heads * geo.head_dim;
  const int64_t value_bytes = DTypeBlockBytes(dtype);
  // Values: a pool of 4096 normal draws converted once, then repeated (speed does not depend
  // on the values; converting 10^8 values one by one would take seconds).
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  constexpr int64_t kPool = 4096;
  std::vector<uint8_t> pool(kPool * value_bytes);
  for (int64_t i = 0; i < kPool; ++i) {
    const float x = dist(rng);
    uint8_t* dst = pool.data() + i * value_bytes;
    switch (dtype) {
      case DType::kFp8E4M3: *dst = Fp32ToFp8E4M3(x * 100.0f); break;
      case DType::kFp8E5M2: *dst = Fp32ToFp8E5M2(x * 100.0f); break;
      case DType::kI8:
        *dst = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(x * 40.0f, -127.0f, 127.0f)));
        break;
      default: QuantizeRow(dtype, &x, dst, 1);
    }
  }
  for (auto* buf : {&data->k, &data->v}) {
    buf->resize(values * value_bytes);
    for (int64_t off = 0; off < values * value_bytes; off += kPool * value_bytes) {
      std::memcpy(buf->data() + off, pool.data(),
                  std::min<int64_t>(kPool * value_bytes, values * value_bytes - off));
    }
  }
  data->block_table.resize(num_blocks);
  std::iota(data->block_table.begin(), data->block_table.end(), 0);
  std::shuffle(data->block_table.begin(), data->block_table.end(), rng);
  kernels::PagedKv& kv = data->kv;
  kv.dtype = dtype;
  kv.block_size = kBlockSize;
  kv.num_kv_heads = geo.num_kv_heads;
  kv.head_dim = geo.head_dim;
  kv.k = data->k.data();
  kv.v = data->v.data();
  data->bytes_read = 2 * context * geo.num_kv_heads * geo.head_dim * value_bytes;
  if (dtype == DType::kFp8E4M3 || dtype == DType::kFp8E5M2) {
    data->head_scales.assign(geo.num_kv_heads, 0.01f);
    kv.k_head_scales = kv.v_head_scales = data->head_scales.data();
    data->bytes_read += 2 * geo.num_kv_heads * 4;
  }
  if (dtype == DType::kI8) {
    data->token_scales.assign(num_blocks * kBlockSize * geo.num_kv_heads, 0.025f);
    kv.k_token_scales = kv.v_token_scales = data->token_scales.data();
    data->bytes_read += 2 * context * geo.num_kv_heads * 4;
  }
  return *data;
}

void BM_PagedDecode(benchmark::State& state, AttnGeometry geo, DType dtype, int64_t context,
                    int threads) {
  const PagedKvData& data = PagedData(geo, dtype, context);
  kernels::PagedSeq seq;
  seq.block_table = data.block_table.data();
  seq.num_keys = context;
  seq.num_queries = 1;
  kernels::PagedAttentionShape shape;
  shape.num_heads = geo.num_heads;
  shape.scale = 1.0f / std::sqrt(static_cast<float>(geo.head_dim));
  std::vector<float> q(geo.num_heads * geo.head_dim), out(q.size());
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& x : q) x = dist(rng);
  ThreadPool* pool = threads > 1 ? Pool(threads) : nullptr;
  for (auto _ : state) {
    kernels::PagedDecodeAttention(q.data(), data.kv, &seq, 1, shape, out.data(), pool);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.counters["kv_GBps"] = benchmark::Counter(
      static_cast<double>(data.bytes_read) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(std::string(kernels::SimdEnabled() ? "simd" : "scalar"));
}

// One decode step's attention over all layers of a batch, as the engine runs it: `seqs`
// sequences of `context` tokens each, `layers` layers whose KV pools are separate (so nothing
// stays cached between layers). Each sequence's first 256 tokens are contiguous blocks (a
// prompt allocated at once takes consecutive free ids); later blocks alternate between the
// sequences, as decode allocates them one step at a time.
void BM_PagedDecodeBatch(benchmark::State& state, AttnGeometry geo, DType dtype, int threads) {
  constexpr int64_t kSeqs = 32, kContext = 320, kLayers = 30, kPromptBlocks = 16;
  constexpr int64_t kBlocksPerSeq = kContext / 16;
  const int64_t blocks_per_layer = kSeqs * kBlocksPerSeq;
  const PagedKvData& data = PagedData(geo, dtype, kLayers * blocks_per_layer * 16);
  std::vector<std::vector<int32_t>> tables(kSeqs);
  for (int64_t s = 0; s < kSeqs; ++s) {
    for (int64_t b = 0; b < kPromptBlocks; ++b) {
      tables[s].push_back(static_cast<int32_t>(s * kPromptBlocks + b));
    }
  }
  for (int64_t b = kPromptBlocks; b < kBlocksPerSeq; ++b) {
    for (int64_t s = 0; s < kSeqs; ++s) {
      tables[s].push_back(static_cast<int32_t>(kSeqs * b + s));
    }
  }
  std::vector<kernels::PagedSeq> seqs(kSeqs);
  for (int64_t s = 0; s < kSeqs; ++s) {
    seqs[s].block_table = tables[s].data();
    seqs[s].num_keys = kContext;
    seqs[s].num_queries = 1;
    seqs[s].query_offset = s;
  }
  kernels::PagedAttentionShape shape;
  shape.num_heads = geo.num_heads;
  shape.scale = 1.0f / std::sqrt(static_cast<float>(geo.head_dim));
  std::vector<float> q(kSeqs * geo.num_heads * geo.head_dim), out(q.size());
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& x : q) x = dist(rng);
  const int64_t layer_values = blocks_per_layer * 16 * geo.num_kv_heads * geo.head_dim;
  const int64_t layer_bytes = layer_values * DTypeBlockBytes(dtype);
  std::vector<kernels::PagedKv> layers(kLayers, data.kv);
  for (int64_t l = 0; l < kLayers; ++l) {
    layers[l].k = data.k.data() + l * layer_bytes;
    layers[l].v = data.v.data() + l * layer_bytes;
    if (dtype == DType::kI8) {
      layers[l].k_token_scales += l * blocks_per_layer * 16 * geo.num_kv_heads;
      layers[l].v_token_scales += l * blocks_per_layer * 16 * geo.num_kv_heads;
    }
  }
  ThreadPool* pool = threads > 1 ? Pool(threads) : nullptr;
  for (auto _ : state) {
    for (const kernels::PagedKv& kv : layers) {
      kernels::PagedDecodeAttention(q.data(), kv, seqs.data(), kSeqs, shape, out.data(), pool);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.counters["kv_GBps"] = benchmark::Counter(
      static_cast<double>(data.bytes_read) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(std::string(kernels::SimdEnabled() ? "simd" : "scalar"));
}

void BM_PagedPrefill(benchmark::State& state, AttnGeometry geo, DType dtype, int64_t tokens,
                     int threads) {
  const PagedKvData& data = PagedData(geo, dtype, tokens);
  kernels::PagedSeq seq;
  seq.block_table = data.block_table.data();
  seq.num_keys = tokens;
  seq.num_queries = tokens;
  kernels::PagedAttentionShape shape;
  shape.num_heads = geo.num_heads;
  shape.scale = 1.0f / std::sqrt(static_cast<float>(geo.head_dim));
  std::vector<float> q(tokens * geo.num_heads * geo.head_dim), out(q.size());
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& x : q) x = dist(rng);
  ThreadPool* pool = threads > 1 ? Pool(threads) : nullptr;
  for (auto _ : state) {
    kernels::PagedPrefillAttention(q.data(), data.kv, seq, shape, out.data(), pool);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const double keys_seen = static_cast<double>(tokens) * static_cast<double>(tokens + 1) / 2;
  state.counters["GFLOPs"] = benchmark::Counter(
      4.0 * geo.head_dim * geo.num_heads * keys_seen * state.iterations() / 1e9,
      benchmark::Counter::kIsRate);
  state.SetLabel(std::string(kernels::SimdEnabled() ? "simd" : "scalar"));
}

int RegisterPagedDecode() {
  for (const AttnGeometry& geo : kAttnGeometries) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kFp8E4M3,
                        DType::kFp8E5M2, DType::kI8}) {
      for (int64_t context : {int64_t{256}, int64_t{1024}, int64_t{8192}, int64_t{32768}}) {
        for (int threads : {1, 2}) {
          std::string name = std::string("PagedDecode/") + geo.name + "/" + DTypeName(dtype) +
                             "/ctx:" + std::to_string(context) +
                             "/threads:" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), BM_PagedDecode, geo, dtype, context, threads)
              ->UseRealTime()
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kFp8E4M3, DType::kI8}) {
    for (int threads : {1, 2}) {
      const AttnGeometry& geo = kAttnGeometries[0];
      std::string name = std::string("PagedDecodeBatch/") + geo.name + "/" + DTypeName(dtype) +
                         "/seqs:32/ctx:320/layers:30/threads:" + std::to_string(threads);
      benchmark::RegisterBenchmark(name.c_str(), BM_PagedDecodeBatch, geo, dtype, threads)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  for (const AttnGeometry& geo : kAttnGeometries) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kFp8E4M3, DType::kI8}) {
      for (int64_t tokens : {int64_t{512}, int64_t{2048}}) {
        for (int threads : {1, 2}) {
          std::string name = std::string("PagedPrefill/") + geo.name + "/" + DTypeName(dtype) +
                             "/tokens:" + std::to_string(tokens) +
                             "/threads:" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), BM_PagedPrefill, geo, dtype, tokens,
                                       threads)
              ->UseRealTime()
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
  return 0;
}
const int kPagedRegistered = RegisterPagedDecode();

}  // namespace
}  // namespace kvserve

BENCHMARK_MAIN();

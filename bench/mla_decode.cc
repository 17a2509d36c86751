// MLA decode speed at long contexts: the absorbed form over the latent cache against the
// expanded form over every head's keys and values (LlamaModel::Options::mla_expanded_kv, the
// MHA-equivalent cache an engine without absorption keeps), one sequence, for each context
// length. The cache of C tokens is filled with random rows written straight into the paged
// storage rather than by a prefill (a real 32K-token prefill of DeepSeek-V2-Lite takes tens of
// minutes on two cores): the time of a decode step does not depend on the cached values. Then
// --gen-tokens decode steps are timed; the median of --runs is reported, with the KV bytes each
// form holds. A form whose cache does not fit in the memory left is reported as such.
//
// usage: mla_decode --model M.gguf [--contexts "1024 8192 32768"] [--gen-tokens 16]
//          [--threads 2] [--runs 3] [--kv-dtype f16]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/system_memory.h"
#include "base/thread_pool.h"
#include "kv/block_table.h"
#include "kv/kv_storage.h"
#include "model/llama.h"
#include "model/model_loader.h"

namespace kvserve {
namespace {

std::vector<int64_t> Ints(const std::string& s) {
  std::istringstream in(s);
  std::vector<int64_t> out;
  int64_t v;
  while (in >> v) out.push_back(v);
  return out;
}

// Decode tokens/s of `gen` steps after `context` cached tokens, or -1 when the cache does not
// fit in `max_kv_bytes`.
double DecodeSpeed(LlamaModel& model, DType dtype, int64_t context, int64_t gen,
                   int64_t max_kv_bytes, ThreadPool* pool) {
  const KvCacheSpec spec = model.kv_spec(dtype, 16);
  const int64_t blocks = spec.blocks_for_tokens(context + gen);
  if (blocks * spec.bytes_per_block() > max_kv_bytes) return -1.0;
  auto storage = KvStorage::Create(spec, blocks);
  KV_CHECK(storage.ok()) << storage.status().ToString();
  BlockTable table(16);
  std::vector<BlockId> ids;
  for (int64_t b = 0; b < blocks; ++b) ids.push_back(static_cast<BlockId>(b));
  table.append_blocks(ids);
  // Random rows for the context (N(0, 1): the latent is RMS-normed, keys and values alike).
  const int64_t row = spec.num_kv_heads * spec.head_dim;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t chunk = 256;
  std::vector<float> k(static_cast<size_t>(chunk * row)), v(k.size());
  for (float& x : k) x = dist(rng);
  for (float& x : v) x = dist(rng);
  std::vector<int64_t> slots(static_cast<size_t>(chunk));
  for (int64_t t0 = 0; t0 < context; t0 += chunk) {
    const int64_t n = std::min(chunk, context - t0);
    for (int64_t i = 0; i < n; ++i) slots[static_cast<size_t>(i)] = table.slot(t0 + i);
    for (int64_t l = 0; l < spec.num_layers; ++l) {
      (*storage)->Write(l, slots.data(), n, k.data(), v.data());
    }
  }
  table.set_num_tokens(context);
  const int64_t V = model.config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(V));
  TokenId next = 100;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < gen; ++step) {
    ForwardBatch batch;
    batch.AddSequence({next}, table);
    KV_CHECK(model.Forward(batch, storage->get(), pool, logits.data()).ok());
    table.set_num_tokens(table.num_tokens() + 1);
    next = static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(gen) / s;
}

int Main(int argc, char** argv) {
  std::string path, dtype_name = "f16";
  std::vector<int64_t> contexts = {1024, 8192, 32768};
  int64_t gen = 16;
  int threads = 2, runs = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], val = argv[i + 1];
    if (key == "--model") path = val;
    else if (key == "--contexts") contexts = Ints(val);
    else if (key == "--gen-tokens") gen = std::stoll(val);
    else if (key == "--threads") threads = std::stoi(val);
    else if (key == "--runs") runs = std::stoi(val);
    else if (key == "--kv-dtype") dtype_name = val;
    else { std::fprintf(stderr, "error: unknown argument %s\n", key.c_str()); return 2; }
  }
  if (path.empty()) {
    std::fprintf(stderr, "usage: mla_decode --model M.gguf [--contexts \"1024 8192 32768\"] ...\n");
    return 2;
  }
  auto dtype = ParseKvCacheDtype(dtype_name, DType::kF16);
  if (!dtype.ok() || *dtype == DType::kFp8E4M3 || *dtype == DType::kFp8E5M2) {
    std::fprintf(stderr, "error: --kv-dtype must be f32, f16, bf16 or int8\n");
    return 2;
  }
  ThreadPool pool(threads);
  std::printf("| form | KV bytes per token | context | decode tok/s (median of %d) |\n"
              "|---|---:|---:|---:|\n", runs);
  for (bool expanded : {false, true}) {
    auto loaded = LoadModel(path);
    if (!loaded.ok()) {
      std::fprintf(stderr, "error: %s\n", loaded.status().ToString().c_str());
      return 1;
    }
    const int64_t weight_bytes = loaded->WeightBytes();
    auto model = LlamaModel::Create(std::move(loaded).value(), {.mla_expanded_kv = expanded});
    if (!model.ok() || !(*model)->config().is_mla()) {
      std::fprintf(stderr, "error: %s\n",
                   model.ok() ? "not an MLA model" : model.status().ToString().c_str());
      return 1;
    }
    const KvCacheSpec spec = (*model)->kv_spec(*dtype, 16);
    // The weights are mapped and mostly resident; leave them and 1 GiB of room.
    const int64_t max_kv = AvailableMemoryBytes() - weight_bytes - (int64_t{1} << 30);
    for (int64_t c : contexts) {
      std::vector<double> speeds;
      for (int r = 0; r < runs; ++r) {
        speeds.push_back(DecodeSpeed(**model, *dtype, c, gen, max_kv, &pool));
        std::fprintf(stderr, "[mla_decode] %s context %lld run %d/%d: %.2f tok/s\n",
                     expanded ? "expanded" : "absorbed", static_cast<long long>(c), r + 1, runs,
                     speeds.back());
        if (speeds.back() < 0) break;
      }
      std::sort(speeds.begin(), speeds.end());
      const double median = speeds[speeds.size() / 2];
      if (median < 0) {
        std::printf("| %s | %lld | %lld | does not fit (%.1f GB of KV) |\n",
                    expanded ? "expanded" : "absorbed (latent)",
                    static_cast<long long>(spec.bytes_per_token()), static_cast<long long>(c),
                    static_cast<double>(spec.bytes_per_token() * c) / 1e9);
      } else {
        std::printf("| %s | %lld | %lld | %.2f |\n", expanded ? "expanded" : "absorbed (latent)",
                    static_cast<long long>(spec.bytes_per_token()), static_cast<long long>(c),
                    median);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) { return kvserve::Main(argc, argv); }

// Batched decode throughput through the paged path: N sequences of P prompt tokens are
// prefilled, then decoded in lockstep for G steps, one ForwardBatch of N one-token rows per
// step (what the scheduler of a serving engine does for N running requests). Reports decode
// tokens/s (N * G / decode time), median of --runs, for each batch size and KV dtype, and the
// speed-up over batch size 1 measured in the same run; also the prefill speed (one sequence
// of P tokens per forward pass, as a batch-1 server prefills).
//
// usage: batch_decode --model M.gguf [--batch "1 8 32"] [--dtypes "f32 fp8_e4m3 int8"]
//          [--prompt-tokens 256] [--gen-tokens 64] [--threads 2] [--runs 3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "model/kv_calibration.h"
#include "model/llama.h"
#include "model/model_loader.h"
#include "model/synthetic.h"

namespace kvserve {
namespace {

std::vector<std::string> Split(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

struct Args {
  std::string model;
  std::vector<int64_t> batch = {1, 8, 32};
  std::vector<std::string> dtypes = {"f32", "f16", "fp8_e4m3", "int8"};
  int64_t prompt_tokens = 256;
  int64_t gen_tokens = 64;
  int threads = 2;
  int runs = 3;
};

struct RunResult {
  double prefill_tokens_per_s = 0;  // one sequence per forward pass, as a batch-1 server
  double decode_tokens_per_s = 0;
};

// Prefill and decode speed of one run.
RunResult RunOnce(LlamaModel& model, DType dtype, const KvCalibration* calibration, int64_t n,
               const Args& a, ThreadPool* pool) {
  const int64_t V = model.config().vocab_size;
  const KvCacheSpec spec = model.kv_spec(dtype, 16);
  const int64_t per_seq = spec.blocks_for_tokens(a.prompt_tokens + a.gen_tokens);
  auto storage = KvStorage::Create(spec, per_seq * n);
  KV_CHECK(storage.ok()) << storage.status().ToString();
  if (calibration != nullptr) KV_CHECK(ApplyKvCalibration(*calibration, storage->get()).ok());
  BlockPool blocks((*storage)->num_blocks());
  std::vector<BlockTable> tables(static_cast<size_t>(n), BlockTable(16));
  for (auto& t : tables) {
    std::vector<BlockId> ids;
    KV_CHECK(blocks.allocate(per_seq, &ids));
    t.append_blocks(ids);
  }
  std::vector<float> logits(static_cast<size_t>(n * V));
  // Prefill, one sequence per step.
  const auto prefill_start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) {
    std::vector<TokenId> prompt = SyntheticTokenIds(a.prompt_tokens + i, V);
    prompt.erase(prompt.begin(), prompt.begin() + i);  // distinct prompts
    ForwardBatch batch;
    batch.AddSequence(prompt, tables[static_cast<size_t>(i)]);
    KV_CHECK(model.Forward(batch, storage->get(), pool, logits.data()).ok());
    tables[static_cast<size_t>(i)].set_num_tokens(a.prompt_tokens);
  }
  const double prefill_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - prefill_start).count();
  std::vector<TokenId> next(static_cast<size_t>(n), 100);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < a.gen_tokens; ++step) {
    ForwardBatch batch;
    for (int64_t i = 0; i < n; ++i) batch.AddSequence({next[static_cast<size_t>(i)]}, tables[static_cast<size_t>(i)]);
    KV_CHECK(model.Forward(batch, storage->get(), pool, logits.data()).ok());
    for (int64_t i = 0; i < n; ++i) {
      BlockTable& t = tables[static_cast<size_t>(i)];
      t.set_num_tokens(t.num_tokens() + 1);
      const float* row = logits.data() + i * V;
      next[static_cast<size_t>(i)] = static_cast<TokenId>(std::max_element(row, row + V) - row);
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {static_cast<double>(n * a.prompt_tokens) / prefill_seconds,
          static_cast<double>(n * a.gen_tokens) / seconds};
}

int Main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") a.model = v;
    else if (k == "--batch") { a.batch.clear(); for (auto& s : Split(v)) a.batch.push_back(std::stoll(s)); }
    else if (k == "--dtypes") a.dtypes = Split(v);
    else if (k == "--prompt-tokens") a.prompt_tokens = std::stoll(v);
    else if (k == "--gen-tokens") a.gen_tokens = std::stoll(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--runs") a.runs = std::stoi(v);
    else { std::fprintf(stderr, "error: unknown argument %s\n", k.c_str()); return 2; }
  }
  if (a.model.empty()) {
    std::fprintf(stderr, "usage: batch_decode --model M.gguf [--batch \"1 8 32\"] ...\n");
    return 2;
  }
  auto loaded = LoadModel(a.model);
  if (!loaded.ok()) {
    std::fprintf(stderr, "error: %s\n", loaded.status().ToString().c_str());
    return 1;
  }
  auto model = LlamaModel::Create(std::move(loaded).value());
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().ToString().c_str());
    return 1;
  }
  ThreadPool pool(a.threads);
  std::printf(
      "| KV dtype | batch | decode tok/s (median of %d) | x batch 1 | prefill tok/s (median) "
      "|\n|---|---|---|---|---|\n",
      a.runs);
  for (const std::string& name : a.dtypes) {
    auto dtype = ParseKvCacheDtype(name, DType::kF32);
    if (!dtype.ok()) {
      std::fprintf(stderr, "error: %s\n", dtype.status().ToString().c_str());
      return 1;
    }
    KvCalibration calibration;
    const bool calibrated =
        *dtype == DType::kFp8E4M3 || *dtype == DType::kFp8E5M2 || *dtype == DType::kI8;
    if (calibrated) {
      auto c = CalibrateKvCache(**model, *dtype,
                                SyntheticTokenIds(256, (*model)->config().vocab_size), &pool,
                                "synthetic");
      KV_CHECK(c.ok());
      calibration = *c;
    }
    double base = 0;
    for (int64_t n : a.batch) {
      std::vector<double> tps, prefill_tps;
      for (int r = 0; r < a.runs; ++r) {
        std::fprintf(stderr, "[batch_decode] %s batch %lld run %d/%d\n", name.c_str(),
                     static_cast<long long>(n), r + 1, a.runs);
        const RunResult run =
            RunOnce(**model, *dtype, calibrated ? &calibration : nullptr, n, a, &pool);
        tps.push_back(run.decode_tokens_per_s);
        prefill_tps.push_back(run.prefill_tokens_per_s);
      }
      std::sort(tps.begin(), tps.end());
      std::sort(prefill_tps.begin(), prefill_tps.end());
      const double median = tps[tps.size() / 2];
      if (n == a.batch.front()) base = median;
      std::printf("| %s | %lld | %.1f | %.2f | %.1f |\n", name.c_str(), static_cast<long long>(n),
                  median, median / base, prefill_tps[prefill_tps.size() / 2]);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) { return kvserve::Main(argc, argv); }

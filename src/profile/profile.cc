// `kvserve profile`: ceilings, kernel efficiencies and engine overheads (see profile.h).
#include "profile/profile.h"

#include <algorithm>
#include <limits>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/percentile.h"
#include "base/system_memory.h"
#include "profile/step_fit.h"
#include "kernels/ceiling.h"
#include "kernels/kernels.h"
#include "kernels/paged_attention.h"
#include "runtime/engine_core.h"
#include "runtime/engine_policy.h"
#include "tensor/dtype.h"

namespace kvserve::profile {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The CPU's model name from /proc/cpuinfo ("AMD EPYC 9454"), or "CPU".
std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(colon + 1);
        name.erase(0, name.find_first_not_of(" \t"));
        if (!name.empty()) return name;
      }
    }
  }
  return "CPU";
}

// Repeats `fn` until `min_seconds` pass (at least once), `repetitions` times; the median time
// of one call.
template <typename Fn>
double TimeMedian(Fn&& fn, int repetitions, double min_seconds = 0.02) {
  fn();  // warm-up
  std::vector<double> per_call;
  for (int r = 0; r < repetitions; ++r) {
    int calls = 0;
    const Clock::time_point start = Clock::now();
    double elapsed = 0.0;
    do {
      fn();
      ++calls;
      elapsed = Seconds(start, Clock::now());
    } while (elapsed < min_seconds);
    per_call.push_back(elapsed / calls);
  }
  return Percentile(per_call, 50.0);
}

// A deployment of the model on `hardware` with every efficiency 1 and no overheads: the pure
// roofline the measured times are compared with.
StatusOr<cost::Deployment> RooflineDeployment(const plan::PlanModel& model, DType kv_dtype,
                                              const cost::HardwareProfile& hardware) {
  cost::HardwareProfile ideal = hardware;
  ideal.efficiency = cost::Efficiency{};
  ideal.efficiency.matmul = cost::EfficiencyCurve::Constant(1.0);
  ideal.efficiency.attention_default = cost::EfficiencyCurve::Constant(1.0);
  return plan::MakeDeployment(model, plan::PlanKvCacheSpec(model, kv_dtype, 16), ideal, 1, 0);
}

// The layer weight matrices the matmul measurement multiplies: 2-D weights of the blocks
// ("blk.N.*"), grouped by layer.
std::vector<std::vector<const Tensor*>> LayerMatrices(const LlamaModel& model) {
  std::vector<std::vector<const Tensor*>> layers(model.config().num_layers);
  for (const auto& [name, tensor] : model.loaded().tensors) {
    if (name.rfind("blk.", 0) != 0 || tensor.shape.size() != 2 || tensor.empty()) continue;
    if (name.size() < 7 || name.compare(name.size() - 7, 7, ".weight") != 0) continue;
    const int64_t layer = std::atoll(name.c_str() + 4);
    if (layer < 0 || layer >= static_cast<int64_t>(layers.size())) continue;
    layers[layer].push_back(&tensor);
  }
  return layers;
}

// Random K/V of one layer for one sequence of `context` tokens in 16-token blocks at `dtype`
// (shuffled block table; fp8 per-head and int8 per-token scales).
struct PagedKvData {
  std::vector<uint8_t> k, v;
  std::vector<float> head_scales, token_scales;
  std::vector<int32_t> block_table;
  kernels::PagedKv kv;
};

std::unique_ptr<PagedKvData> RandomPagedKv(DType dtype, int64_t num_kv_heads, int64_t head_dim,
                                           int64_t context) {
  constexpr int64_t kBlockSize = 16;
  auto data = std::make_unique<PagedKvData>();
  const int64_t num_blocks = (context + kBlockSize - 1) / kBlockSize;
  const int64_t values = num_blocks * kBlockSize * num_kv_heads * head_dim;
  const int64_t value_bytes = DTypeBlockBytes(dtype);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  constexpr int64_t kPool = 4096;  // values converted once, then repeated
  std::vector<uint8_t> pool(kPool * value_bytes);
  for (int64_t i = 0; i < kPool; ++i) {
    const float x = dist(rng);
    uint8_t* dst = pool.data() + i * value_bytes;
    if (dtype == DType::kFp8E4M3) {
      *dst = Fp32ToFp8E4M3(x * 100.0f);
    } else if (dtype == DType::kI8) {
      *dst = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(x * 40.0f, -127.0f, 127.0f)));
    } else {
      QuantizeRow(dtype, &x, dst, 1);
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
  kv.num_kv_heads = num_kv_heads;
  kv.head_dim = head_dim;
  kv.k = data->k.data();
  kv.v = data->v.data();
  if (dtype == DType::kFp8E4M3) {
    data->head_scales.assign(num_kv_heads, 0.01f);
    kv.k_head_scales = kv.v_head_scales = data->head_scales.data();
  }
  if (dtype == DType::kI8) {
    data->token_scales.assign(num_blocks * kBlockSize * num_kv_heads, 0.025f);
    kv.k_token_scales = kv.v_token_scales = data->token_scales.data();
  }
  return data;
}

// A run of one engine for the overhead fit.
struct EngineRun {
  std::unique_ptr<PagedKvCache> kv;
  std::unique_ptr<EngineCore> core;
};

StatusOr<EngineRun> MakeEngine(LlamaModel& model, ThreadPool* pool, int64_t max_num_seqs,
                               int64_t max_tokens_per_step) {
  EngineConfigOptions options;
  options.kv.dtype = "auto";
  options.kv.block_size = 16;
  options.kv.max_model_len = std::min<int64_t>(model.config().max_seq_len, 2048);
  options.kv.memory_utilization = 0.0;
  options.default_num_sequences = max_num_seqs;
  options.scheduler.max_num_seqs = max_num_seqs;
  options.scheduler.max_num_batched_tokens = max_tokens_per_step;
  options.scheduler.enable_prefix_caching = false;
  options.kv.max_num_batched_tokens = max_tokens_per_step;
  KV_ASSIGN_OR_RETURN(EngineConfig config, ResolveEngineConfig(options, model, nullptr));
  config.core.enable_prefix_caching = false;
  EngineRun run;
  KV_ASSIGN_OR_RETURN(PagedKvCache kv, CreatePagedKvCache(model, nullptr, config.kv, pool));
  run.kv = std::make_unique<PagedKvCache>(std::move(kv));
  KV_ASSIGN_OR_RETURN(run.core, EngineCore::Create(config.core, &model, run.kv.get(), pool));
  return run;
}

std::vector<TokenId> RandomPrompt(std::mt19937& rng, int64_t vocab, int64_t n) {
  std::uniform_int_distribution<TokenId> token(1, static_cast<TokenId>(std::max<int64_t>(2, vocab) - 1));
  std::vector<TokenId> ids(n);
  for (TokenId& t : ids) t = token(rng);
  return ids;
}

RequestInput GreedyRequest(std::vector<TokenId> prompt, int64_t max_tokens) {
  RequestInput in;
  in.prompt_ids = std::move(prompt);
  in.sampling.temperature = 0.0f;
  in.max_tokens = max_tokens;
  in.ignore_eos = true;
  return in;
}

}  // namespace

StatusOr<ProfileResult> ProfileMachine(LlamaModel& model, const plan::PlanModel& shape_source,
                                       ThreadPool* pool, const ProfileOptions& options) {
  if (shape_source.kv_layout != KvLayout::kSeparateKv) {
    return InvalidArgumentError("profile: models with a latent (MLA) KV cache are not profiled "
                                "yet; profile a model with separate K/V heads of the same size");
  }
  const auto progress = [&](const std::string& stage, int64_t done, int64_t total) {
    if (options.progress) options.progress(stage, done, total);
  };
  const int reps = std::max(1, options.repetitions);
  ProfileResult result;
  json& m = result.measurements;
  cost::HardwareProfile& hw = result.profile;

  // 1. Ceilings.
  progress("ceilings", 0, 3);
  const kernels::CeilingMeasurement read =
      kernels::MeasureReadBandwidth(pool, options.read_buffer_bytes, reps);
  progress("ceilings", 1, 3);
  double fma_per_cpu = 0.0;
  const kernels::CeilingMeasurement fma = kernels::MeasureFmaPeak(pool, reps, &fma_per_cpu);
  progress("ceilings", 2, 3);
  const kernels::CeilingMeasurement int8 = kernels::MeasureInt8DotPeak(pool, reps);
  progress("ceilings", 3, 3);
  m["ceilings"] = {{"read_bytes_per_s", {{"best", read.best}, {"median", read.median}}},
                   {"f32_fma_flops", {{"best", fma.best}, {"median", fma.median}}},
                   {"int8_dot_ops", {{"best", int8.best}, {"median", int8.median}}},
                   {"read_buffer_bytes", options.read_buffer_bytes},
                   {"repetitions", reps}};
  hw.name = options.name;
  hw.description = CpuModelName() + ", " + kernels::SimdLevelName() + " kernels, " +
                   std::to_string(pool->num_threads()) + " threads";
  hw.source = "kvserve profile on " + shape_source.name + " (" + shape_source.source + ")";
  hw.memory_bytes = TotalMemoryBytes();
  hw.memory_bandwidth_bytes_per_s = read.best;
  hw.peak_flops_f32 = fma.best;
  hw.peak_flops_bf16 = fma.best;  // the CPU kernels compute f16/bf16 weights in f32
  hw.peak_flops_int8 = int8.best;
  hw.compute_dtype = DType::kF32;
  hw.price_per_hour = 0.0;
  hw.price_note = "not set: give --price-per-hour (a measured machine has no list price)";
  hw.efficiency = cost::Efficiency{};
  hw.efficiency.attention_default = cost::EfficiencyCurve::Constant(1.0);
  hw.efficiency.matmul = cost::EfficiencyCurve::Constant(1.0);

  // 2. Matmul efficiency at each row count.
  const std::vector<std::vector<const Tensor*>> layers = LayerMatrices(model);
  int64_t max_k = 1, max_n = 1;
  for (const auto& layer : layers) {
    for (const Tensor* w : layer) {
      max_k = std::max(max_k, w->cols());
      max_n = std::max(max_n, w->rows());
    }
  }
  if (layers.empty() || layers[0].empty()) {
    return InvalidArgumentError("profile: the model has no layer weight matrices to measure");
  }
  KV_ASSIGN_OR_RETURN(cost::Deployment ideal,
                      RooflineDeployment(shape_source, hw.compute_dtype, hw));
  const int64_t num_layers = static_cast<int64_t>(layers.size());
  json matmul_rows = json::array();
  cost::EfficiencyCurve matmul_curve;
  const int64_t max_rows = *std::max_element(options.matmul_rows.begin(), options.matmul_rows.end());
  std::vector<float> x(max_rows * max_k), y(max_rows * max_n);
  {
    std::mt19937 rng(11);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (float& v : x) v = dist(rng);
  }
  for (size_t i = 0; i < options.matmul_rows.size(); ++i) {
    const int64_t rows = options.matmul_rows[i];
    progress("matmul", static_cast<int64_t>(i), static_cast<int64_t>(options.matmul_rows.size()));
    const cost::StepSeq seq{0, rows, false};
    const cost::StepCost ideal_step = cost::ComputeStepCost(ideal, std::span(&seq, 1));
    // Enough layers that a pass does ~2e10 operations (all of them when that is memory-bound).
    const double per_layer_ops = 2.0 * rows * ideal.model.layer_parameters / num_layers;
    const int64_t timed_layers =
        std::clamp<int64_t>(static_cast<int64_t>(std::ceil(2e10 / std::max(1.0, per_layer_ops))),
                            1, num_layers);
    const double seconds = TimeMedian(
        [&] {
          for (int64_t l = 0; l < timed_layers; ++l) {
            for (const Tensor* w : layers[l]) kernels::Matmul(x.data(), rows, *w, y.data(), pool);
          }
        },
        reps);
    const double model_seconds = seconds * num_layers / timed_layers;
    const double fraction = ClampFraction(ideal_step.matmul.seconds / model_seconds);
    matmul_curve.points.push_back({static_cast<double>(rows), fraction});
    matmul_rows.push_back({{"rows", rows},
                           {"measured_s", model_seconds},
                           {"roofline_s", ideal_step.matmul.seconds},
                           {"layers_timed", timed_layers},
                           {"efficiency", fraction}});
  }
  progress("matmul", static_cast<int64_t>(options.matmul_rows.size()),
           static_cast<int64_t>(options.matmul_rows.size()));
  std::sort(matmul_curve.points.begin(), matmul_curve.points.end());
  hw.efficiency.matmul = matmul_curve;
  m["matmul"] = matmul_rows;

  // 3. Paged decode attention per KV dtype and context (one layer, one query, times layers).
  json attention = json::object();
  const int64_t num_attention = static_cast<int64_t>(
      options.kv_dtypes.size() * options.attention_contexts.size() +
      options.prefill_attention_rows.size());
  int64_t attention_done = 0;
  kernels::PagedAttentionShape attn_shape;
  attn_shape.num_heads = shape_source.num_heads;
  attn_shape.scale = 1.0f / std::sqrt(static_cast<float>(shape_source.head_dim));
  std::vector<float> q(shape_source.num_heads * shape_source.head_dim, 0.1f), out(q.size());
  for (DType dtype : options.kv_dtypes) {
    KV_ASSIGN_OR_RETURN(cost::Deployment dtype_ideal, RooflineDeployment(shape_source, dtype, hw));
    cost::EfficiencyCurve curve;
    json rows = json::array();
    for (int64_t context : options.attention_contexts) {
      progress("attention", attention_done++, num_attention);
      auto data = RandomPagedKv(dtype, shape_source.num_kv_heads, shape_source.head_dim, context);
      kernels::PagedSeq seq;
      seq.block_table = data->block_table.data();
      seq.num_keys = context;
      seq.num_queries = 1;
      const double seconds = TimeMedian(
          [&] { kernels::PagedDecodeAttention(q.data(), data->kv, &seq, 1, attn_shape, out.data(), pool); },
          reps);
      const cost::StepSeq step_seq{context - 1, 1, false};
      const cost::StepCost ideal_step = cost::ComputeStepCost(dtype_ideal, std::span(&step_seq, 1));
      const double model_seconds = seconds * shape_source.num_layers;
      const double fraction = ClampFraction(ideal_step.attention.seconds / model_seconds);
      curve.points.push_back({static_cast<double>(context), fraction});
      rows.push_back({{"context_tokens", context},
                      {"measured_s", model_seconds},
                      {"roofline_s", ideal_step.attention.seconds},
                      {"efficiency", fraction}});
    }
    std::sort(curve.points.begin(), curve.points.end());
    hw.efficiency.attention[DTypeName(dtype)] = curve;
    if (dtype == DType::kF32) hw.efficiency.attention_default = curve;
    attention[DTypeName(dtype)] = rows;
  }
  // Prefill chunks: n query rows after a cached context, causal within the chunk.
  {
    KV_ASSIGN_OR_RETURN(cost::Deployment f32_ideal, RooflineDeployment(shape_source, DType::kF32, hw));
    cost::EfficiencyCurve curve;
    json rows = json::array();
    const int64_t cached = options.prefill_attention_cached_tokens;
    for (int64_t n : options.prefill_attention_rows) {
      progress("attention", attention_done++, num_attention);
      auto data = RandomPagedKv(DType::kF32, shape_source.num_kv_heads, shape_source.head_dim,
                                cached + n);
      std::vector<float> qs(n * shape_source.num_heads * shape_source.head_dim, 0.1f);
      std::vector<float> outs(qs.size());
      kernels::PagedSeq seq;
      seq.block_table = data->block_table.data();
      seq.num_keys = cached + n;
      seq.num_queries = n;
      const double seconds = TimeMedian(
          [&] {
            kernels::PagedPrefillAttention(qs.data(), data->kv, seq, attn_shape, outs.data(), pool);
          },
          reps);
      const cost::StepSeq step_seq{cached, n, false};
      const cost::StepCost ideal_step = cost::ComputeStepCost(f32_ideal, std::span(&step_seq, 1));
      const double model_seconds = seconds * shape_source.num_layers;
      const double fraction = ClampFraction(ideal_step.attention.seconds / model_seconds);
      curve.points.push_back({static_cast<double>(n), fraction});
      rows.push_back({{"query_rows", n},
                      {"cached_tokens", cached},
                      {"measured_s", model_seconds},
                      {"roofline_s", ideal_step.attention.seconds},
                      {"efficiency", fraction}});
    }
    std::sort(curve.points.begin(), curve.points.end());
    hw.efficiency.prefill_attention = curve;
    attention["prefill_f32"] = rows;
  }
  progress("attention", num_attention, num_attention);
  m["attention"] = attention;

  // 4. Engine steps: what the rooflines above leave unexplained, as a + b x tokens.
  const int64_t max_batch = *std::max_element(options.decode_batches.begin(),
                                              options.decode_batches.end());
  const int64_t max_prefill = *std::max_element(options.prefill_tokens.begin(),
                                                options.prefill_tokens.end());
  constexpr int64_t kPromptTokens = 32;
  constexpr int64_t kDecodeSteps = 16;
  const int64_t step_budget = std::max(max_prefill, max_batch * kPromptTokens);
  KV_ASSIGN_OR_RETURN(EngineRun engine, MakeEngine(model, pool, max_batch, step_budget));
  cost::HardwareProfile calibrated = hw;
  calibrated.efficiency.step_overhead_s = 0.0;
  calibrated.efficiency.token_overhead_s = 0.0;
  KV_ASSIGN_OR_RETURN(cost::Deployment engine_deployment,
                      plan::MakeDeployment(shape_source, engine.kv->spec, calibrated, 1, 0));
  std::mt19937 rng(5);
  const int64_t vocab = model.config().vocab_size;
  SeqId next_id = 1;
  std::vector<double> fit_tokens, fit_measured_s, fit_roofline_s;
  json steps = json::array();
  const int64_t num_engine = static_cast<int64_t>(options.decode_batches.size() +
                                                  options.prefill_tokens.size());
  int64_t engine_done = 0;
  const auto record = [&](const std::string& kind, int64_t tokens, double measured_s,
                          const std::vector<cost::StepSeq>& seqs) {
    const cost::StepCost predicted = cost::ComputeStepCost(engine_deployment, seqs);
    fit_tokens.push_back(static_cast<double>(tokens));
    fit_measured_s.push_back(measured_s);
    fit_roofline_s.push_back(predicted.seconds);
    steps.push_back({{"kind", kind},
                     {"tokens", tokens},
                     {"measured_s", measured_s},
                     {"roofline_s", predicted.seconds}});
  };
  // Each kind is measured in 3 rounds and the median round kept: one round slowed by another
  // process on a shared machine would tilt the whole fit, and the fastest round would predict
  // a machine quieter than the one serving.
  constexpr int kRounds = 3;
  for (int64_t batch : options.decode_batches) {
    progress("engine", engine_done++, num_engine);
    std::vector<double> rounds;
    for (int round = 0; round < kRounds; ++round) {
      for (int64_t b = 0; b < batch; ++b) {
        KV_RETURN_IF_ERROR(engine.core->add_request(
            next_id++, GreedyRequest(RandomPrompt(rng, vocab, kPromptTokens), kDecodeSteps + 2)));
      }
      engine.core->step();  // every prompt prefilled in one step (the budget holds them)
      std::vector<double> times;
      for (int64_t s = 0; s < kDecodeSteps && engine.core->has_unfinished(); ++s) {
        const Clock::time_point start = Clock::now();
        engine.core->step();
        times.push_back(Seconds(start, Clock::now()));
      }
      while (engine.core->has_unfinished()) engine.core->step();
      rounds.push_back(Percentile(times, 50.0));
    }
    const int64_t mid_context = kPromptTokens + kDecodeSteps / 2;
    record("decode", batch, Percentile(rounds, 50.0),
           std::vector<cost::StepSeq>(batch, cost::StepSeq{mid_context, 1, true}));
  }
  for (int64_t tokens : options.prefill_tokens) {
    progress("engine", engine_done++, num_engine);
    std::vector<double> rounds;
    for (int round = 0; round < kRounds; ++round) {
      std::vector<double> times;
      for (int r = 0; r < reps + 1; ++r) {
        KV_RETURN_IF_ERROR(engine.core->add_request(
            next_id++, GreedyRequest(RandomPrompt(rng, vocab, tokens), 1)));
        const Clock::time_point start = Clock::now();
        engine.core->step();
        const double s = Seconds(start, Clock::now());
        if (r > 0) times.push_back(s);  // the first warms the workspace
        while (engine.core->has_unfinished()) engine.core->step();
      }
      rounds.push_back(Percentile(times, 50.0));
    }
    record("prefill", tokens, Percentile(rounds, 50.0), {cost::StepSeq{0, tokens, true}});
  }
  progress("engine", num_engine, num_engine);
  const EngineFit fit = FitEngineSteps(fit_tokens, fit_measured_s, fit_roofline_s);
  hw.efficiency.step_overhead_s = std::min(fit.step_s, 5.0);
  hw.efficiency.token_overhead_s = std::min(fit.token_s, 1.0);
  // The kernels inside the engine run at 1 / scale of their efficiency alone.
  ScaleEfficiencies(1.0 / fit.scale, &hw.efficiency);
  m["engine_steps"] = steps;
  m["overhead_fit"] = {{"step_overhead_s", hw.efficiency.step_overhead_s},
                       {"token_overhead_s", hw.efficiency.token_overhead_s},
                       {"engine_scale", fit.scale},
                       {"median_relative_error", fit.median_relative_error},
                       {"kv_cache_dtype", DTypeName(engine.kv->spec.dtype)}};
  m["model"] = {{"name", shape_source.name}, {"source", shape_source.source},
                {"threads", pool->num_threads()}, {"simd_level", kernels::SimdLevelName()}};
  KV_RETURN_IF_ERROR(cost::ValidateHardwareProfile(hw));
  return result;
}

json ProfileToJson(const ProfileResult& result) {
  json j = cost::HardwareProfileToJson(result.profile);
  j["measurements"] = result.measurements;
  return j;
}

}  // namespace kvserve::profile

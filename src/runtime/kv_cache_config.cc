#include "runtime/kv_cache_config.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "base/system_memory.h"
#include "model/kv_calibration.h"
#include "model/synthetic.h"

namespace kvserve {
namespace {

std::string Bytes(double b) { return FormatBytesDecimalAndBinary(b); }

}  // namespace

int64_t ForwardWorkspaceBytes(const ModelConfig& c, int64_t num_tokens) {
  const int64_t q_dim = c.num_heads * c.head_dim;
  const int64_t kv_dim = c.num_kv_heads * c.head_dim;
  int64_t floats_per_row = 2 * c.hidden_dim + 2 * q_dim + 2 * c.ffn_dim + 2 * kv_dim;
  if (c.is_mla()) {  // absorbed queries and latent-space outputs, the latent rows
    const int64_t row = c.mla.kv_lora_rank + c.mla.qk_rope_head_dim;
    floats_per_row += 2 * c.num_heads * row + row;
  }
  if (c.is_moe()) floats_per_row += c.hidden_dim + 3 * c.moe.expert_ffn_dim *
                                                       std::max<int64_t>(1, c.moe.num_shared_experts);
  return num_tokens * floats_per_row * 4 + c.vocab_size * 4;
}

StatusOr<KvBudget> ComputeKvBudget(const KvCacheSpec& spec, const KvCacheConfig& config,
                                   int64_t max_model_len, int64_t weight_bytes,
                                   int64_t workspace_bytes, int64_t available_bytes) {
  KvBudget budget;
  int64_t bytes = 0;
  if (config.memory_bytes > 0) {
    bytes = config.memory_bytes;
    budget.source = "--kv-cache-memory " + Bytes(static_cast<double>(bytes));
  } else if (config.memory_utilization == 0.0) {
    const int64_t seqs = std::max<int64_t>(config.default_num_sequences, 1);
    bytes = seqs * spec.blocks_for_tokens(max_model_len) * spec.bytes_per_block() +
            spec.fixed_scale_bytes();
    budget.source = "room for " + std::to_string(seqs) + " sequence" + (seqs > 1 ? "s" : "") +
                    " of --max-model-len tokens (no --kv-cache-memory or --memory-utilization)";
  } else {
    if (!(config.memory_utilization > 0.0 && config.memory_utilization <= 1.0)) {
      return InvalidArgumentError("--memory-utilization must be in (0, 1]");
    }
    if (available_bytes <= 0) {
      return FailedPreconditionError(
          "cannot tell how much memory is available; pass --kv-cache-memory BYTES");
    }
    const int64_t after = available_bytes - weight_bytes - workspace_bytes;
    bytes = after > 0 ? static_cast<int64_t>(config.memory_utilization *
                                             static_cast<double>(after))
                      : 0;
    char buf[256];
    std::snprintf(buf, sizeof(buf), "--memory-utilization %.2f of %s available after weights "
                  "(%s) and workspace (%s)", config.memory_utilization,
                  Bytes(static_cast<double>(std::max<int64_t>(after, 0))).c_str(),
                  Bytes(static_cast<double>(weight_bytes)).c_str(),
                  Bytes(static_cast<double>(workspace_bytes)).c_str());
    budget.source = buf;
  }
  bytes -= spec.fixed_scale_bytes();
  budget.num_blocks = std::max<int64_t>(bytes, 0) / spec.bytes_per_block();
  const int64_t need_blocks = spec.blocks_for_tokens(max_model_len);
  if (budget.num_blocks < need_blocks) {
    const int64_t missing = (need_blocks - budget.num_blocks) * spec.bytes_per_block();
    return ResourceExhaustedError(
        "the KV cache budget (" + budget.source + ") holds " +
        std::to_string(budget.num_blocks * spec.block_size) + " tokens, fewer than one " +
        std::to_string(max_model_len) + "-token sequence (--max-model-len) needs: " +
        Bytes(static_cast<double>(missing)) +
        " more are needed. Raise --kv-cache-memory / --memory-utilization, lower "
        "--max-model-len, or use a smaller --kv-cache-dtype");
  }
  budget.num_blocks = std::min<int64_t>(budget.num_blocks, INT32_MAX);
  return budget;
}

std::vector<std::string> PagedKvCache::Describe() const {
  std::vector<std::string> lines;
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "KV cache: %s; %s per token; capacity %lld tokens in %lld blocks = %s",
                spec.ToString().c_str(), Bytes(static_cast<double>(spec.bytes_per_token())).c_str(),
                static_cast<long long>(capacity_tokens()), static_cast<long long>(num_blocks()),
                Bytes(static_cast<double>(storage->total_bytes())).c_str());
  lines.push_back(buf);
  lines.push_back("KV budget: " + budget_source + "; max model length " +
                  std::to_string(max_model_len) + " tokens");
  const KvScales& scales = storage->scales();
  if (spec.dtype == DType::kFp8E4M3 || spec.dtype == DType::kFp8E5M2) {
    const auto [kmin, kmax] = std::minmax_element(scales.k.begin(), scales.k.end());
    const auto [vmin, vmax] = std::minmax_element(scales.v.begin(), scales.v.end());
    std::snprintf(buf, sizeof(buf),
                  "KV scales: per layer and KV head, %s (%s); K %.3g..%.3g, V %.3g..%.3g",
                  KvScaleSourceName(scales.source), scales.detail.c_str(), *kmin, *kmax, *vmin,
                  *vmax);
    lines.push_back(buf);
  } else if (spec.dtype == DType::kI8) {
    lines.push_back("KV scales: int8, dynamic per token and KV head (absmax / 127)");
  }
  if (storage->has_channel_norm()) {
    lines.push_back("KV channel normalization: K and V are stored as (x - channel mean) / "
                    "channel range from calibration (exact for attention)");
  }
  return lines;
}

StatusOr<PagedKvCache> CreatePagedKvCache(LlamaModel& model, const Tokenizer* tokenizer,
                                          const KvCacheConfig& config, ThreadPool* pool) {
  const ModelConfig& mc = model.config();
  KV_ASSIGN_OR_RETURN(DType dtype, ParseKvCacheDtype(config.dtype, DType::kF32));
  PagedKvCache cache;
  cache.spec = model.kv_spec(dtype, config.block_size);
  KV_RETURN_IF_ERROR(cache.spec.Validate());
  if (config.max_model_len < 0) return InvalidArgumentError("--max-model-len must be positive");
  cache.max_model_len = config.max_model_len > 0 ? config.max_model_len : mc.max_seq_len;
  if (cache.max_model_len > mc.max_seq_len) {
    return InvalidArgumentError("--max-model-len " + std::to_string(cache.max_model_len) +
                                " exceeds the model's context of " +
                                std::to_string(mc.max_seq_len) + " tokens");
  }
  const int64_t step_rows = config.max_num_batched_tokens > 0 ? config.max_num_batched_tokens
                                                              : cache.max_model_len;
  KV_ASSIGN_OR_RETURN(
      KvBudget budget,
      ComputeKvBudget(cache.spec, config, cache.max_model_len,
                      model.loaded().WeightBytes() - model.replaced_weights_bytes(),
                      ForwardWorkspaceBytes(mc, step_rows), AvailableMemoryBytes()));
  cache.budget_source = budget.source;
  KV_ASSIGN_OR_RETURN(cache.storage, KvStorage::Create(cache.spec, budget.num_blocks));

  const bool fp8 = dtype == DType::kFp8E4M3 || dtype == DType::kFp8E5M2;
  if (fp8 || dtype == DType::kI8) {
    // Scales from the model file when it has them; the calibration pass still measures the
    // channel normalization (and the fp8 scales when the file has none).
    auto from_file = fp8 ? Fp8KvScalesFromModel(model.loaded())
                         : StatusOr<KvScales>(NotFoundError("int8 has dynamic scales"));
    if (!from_file.ok() && from_file.status().code() != StatusCode::kNotFound) {
      return from_file.status();
    }
    std::string text = BuiltinCalibrationText();
    std::string what = "built-in text";
    if (!config.calibration_file.empty()) {
      std::ifstream in(config.calibration_file, std::ios::binary);
      if (!in) {
        return NotFoundError("cannot read --kv-calibration-file '" + config.calibration_file +
                             "'");
      }
      std::ostringstream ss;
      ss << in.rdbuf();
      text = ss.str();
      what = config.calibration_file;
      if (text.empty()) {
        return InvalidArgumentError("--kv-calibration-file '" + config.calibration_file +
                                    "' is empty");
      }
    }
    std::vector<TokenId> tokens;
    if (tokenizer != nullptr) {
      EncodeOptions encode;
      encode.add_bos = true;
      tokens = tokenizer->Encode(text, encode);
    } else {
      tokens = SyntheticTokenIds(512, mc.vocab_size);
      what = "synthetic token ids (the model has no tokenizer)";
    }
    // Enough tokens to see typical magnitudes; calibration runs at start-up, keep it short.
    if (tokens.size() > 2048) tokens.resize(2048);
    KV_ASSIGN_OR_RETURN(KvCalibration calibration,
                        CalibrateKvCache(model, dtype, tokens, pool,
                                         std::to_string(tokens.size()) + " tokens of " + what));
    if (from_file.ok()) calibration.scales = std::move(from_file).value();
    KV_RETURN_IF_ERROR(ApplyKvCalibration(calibration, cache.storage.get()));
  }
  return cache;
}

}  // namespace kvserve

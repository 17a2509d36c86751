#include "model/kv_calibration.h"

#include <algorithm>

namespace kvserve {

const std::string& BuiltinCalibrationText() {
  static const std::string text =
      "Once upon a time, in a small village at the edge of a great forest, there lived an old "
      "clockmaker named Elias. Every morning he opened the shutters of his narrow shop, wound "
      "the hundred clocks that hung on its walls, and listened until they all ticked together. "
      "Children stopped at his window on their way to school to watch the brass gears turn.\n"
      "The report concluded that the new bridge would reduce traffic on the main road by "
      "about a third, although the estimate depended on how many drivers changed their "
      "routes. The council voted seven to two in favour, and construction is expected to "
      "begin next spring, subject to the final budget review.\n"
      "To compute the average of a list of numbers, add them together and divide the sum by "
      "how many numbers there are. For example, the average of 3, 5 and 10 is 18 divided by "
      "3, which is 6. In Python: def mean(xs): return sum(xs) / len(xs)\n"
      "Q: What is the capital of France?\nA: The capital of France is Paris, a city on the "
      "Seine known for its museums, its cafes and the Eiffel Tower, built for the World's "
      "Fair of 1889.\n"
      "She packed a blue umbrella, two apples, a notebook and a pencil, then walked to the "
      "station, where the nine o'clock train was already waiting on platform four. \"Are you "
      "coming with us?\" asked her brother. \"Of course,\" she said, smiling.\n";
  return text;
}

StatusOr<KvCalibration> CalibrateKvCache(LlamaModel& model, DType dtype,
                                         const std::vector<TokenId>& tokens, ThreadPool* pool,
                                         const std::string& detail, bool normalize) {
  const bool fp8 = dtype == DType::kFp8E4M3 || dtype == DType::kFp8E5M2;
  if (!fp8 && dtype != DType::kI8) {
    return InvalidArgumentError("calibration is for fp8 and int8 KV dtypes");
  }
  if (tokens.empty()) return InvalidArgumentError("KV calibration needs at least one token");
  const ModelConfig& c = model.config();
  const int64_t window = std::min<int64_t>(c.max_seq_len, 512);
  const KvCacheSpec spec = model.kv_spec(DType::kF32, 16);
  KV_ASSIGN_OR_RETURN(std::unique_ptr<KvStorage> storage,
                      KvStorage::Create(spec, spec.blocks_for_tokens(window)));
  storage->observe_absmax(true);
  BlockTable table(spec.block_size);
  std::vector<BlockId> ids;
  for (int64_t i = 0; i < storage->num_blocks(); ++i) ids.push_back(static_cast<BlockId>(i));
  table.append_blocks(ids);
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (int64_t begin = 0; begin < n; begin += window) {
    const int64_t len = std::min(window, n - begin);
    ForwardBatch batch;
    batch.AddSequence(tokens.data() + begin, len, 0, table);
    KV_RETURN_IF_ERROR(model.Forward(batch, storage.get(), pool, logits.data()));
  }
  KvCalibration result;
  std::vector<float> k_absmax = storage->absmax_k();  // per head, of what will be stored
  std::vector<float> v_absmax = storage->absmax_v();
  if (normalize) {
    KvStorage::ChannelNorm& norm = result.norm;
    norm.k_mean = storage->observed_mean(/*keys=*/true);
    norm.v_mean = storage->observed_mean(/*keys=*/false);
    const std::vector<float> k_range = storage->observed_centered_absmax(true, norm.k_mean);
    const std::vector<float> v_range = storage->observed_centered_absmax(false, norm.v_mean);
    if (fp8) {
      // Floating formats keep their relative precision at any magnitude, so equalizing
      // channel ranges gains nothing and a per-channel range (a noisier estimate than a
      // per-head one) clips more: centering only, per-head scales of the centered values.
      norm.k_scale.assign(k_range.size(), 1.0f);
      norm.v_scale.assign(v_range.size(), 1.0f);
      const size_t hd = static_cast<size_t>(c.head_dim);
      for (size_t h = 0; h < k_absmax.size(); ++h) {
        k_absmax[h] = *std::max_element(k_range.begin() + h * hd, k_range.begin() + (h + 1) * hd);
        v_absmax[h] = *std::max_element(v_range.begin() + h * hd, v_range.begin() + (h + 1) * hd);
      }
    } else {
      // int8 (a scale per token and head, set by the largest channel): equalize the channels.
      // A channel that never varied keeps range 1.
      norm.k_scale = k_range;
      norm.v_scale = v_range;
      for (auto* ranges : {&norm.k_scale, &norm.v_scale}) {
        for (float& x : *ranges) x = x > 1e-12f ? x : 1.0f;
      }
    }
  }
  if (fp8) {
    result.scales = Fp8ScalesFromAbsmax(dtype, k_absmax, v_absmax, kFp8CalibrationHeadroom);
    result.scales.source = KvScaleSource::kCalibrated;
    result.scales.detail = detail;
  }
  return result;
}

Status ApplyKvCalibration(const KvCalibration& calibration, KvStorage* storage) {
  if (!calibration.scales.k.empty()) KV_RETURN_IF_ERROR(storage->SetScales(calibration.scales));
  if (!calibration.norm.k_mean.empty()) {
    KV_RETURN_IF_ERROR(storage->SetChannelNorm(calibration.norm));
  }
  return OkStatus();
}

StatusOr<KvScales> Fp8KvScalesFromModel(const LoadedModel& model) {
  const ModelConfig& c = model.config;
  KvScales scales;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    for (const char* which : {"k", "v"}) {
      const std::string name = "blk." + std::to_string(l) + ".attn_" + which + ".kv_scale";
      auto it = model.tensors.find(name);
      if (it == model.tensors.end()) {
        if (l == 0 && which[0] == 'k') return NotFoundError("the model file has no KV scales");
        return InvalidArgumentError("the model file has KV scales for some layers but not '" +
                                    name + "'");
      }
      const Tensor& t = it->second;
      const int64_t n = t.num_elements();
      if ((n != 1 && n != c.num_kv_heads) ||
          (t.dtype != DType::kF32 && t.dtype != DType::kF16 && t.dtype != DType::kBF16)) {
        return InvalidArgumentError("KV scale tensor '" + name + "' must hold 1 or " +
                                    std::to_string(c.num_kv_heads) + " float values");
      }
      std::vector<float> values(static_cast<size_t>(n));
      DequantizeRow(t.dtype, t.data, values.data(), n);
      std::vector<float>& dst = which[0] == 'k' ? scales.k : scales.v;
      for (int64_t h = 0; h < c.num_kv_heads; ++h) dst.push_back(values[n == 1 ? 0 : h]);
    }
  }
  scales.source = KvScaleSource::kModelFile;
  scales.detail = model.path;
  return scales;
}

}  // namespace kvserve

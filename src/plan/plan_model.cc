// The models the planner plans for: presets, parameter estimates, and Hugging Face, GGUF and
// llama2.c files through the model library's readers (see plan_model.h).
#include "plan/plan_model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "model/gguf.h"
#include "model/model_config.h"
#include "model/model_loader.h"
#include "model/synthetic.h"
#include "model/weight_bytes.h"

namespace kvserve::plan {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Ranges the planner accepts for the KV geometry, so that bytes per token cannot overflow.
constexpr int64_t kMaxLayers = int64_t{1} << 12;
constexpr int64_t kMaxHeads = int64_t{1} << 12;
constexpr int64_t kMaxHeadDim = int64_t{1} << 14;
constexpr int64_t kMaxLatentDim = int64_t{1} << 16;

Status CheckRange(const std::string& what, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    return InvalidArgumentError(what + " = " + std::to_string(value) + " is out of range [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return OkStatus();
}

// Parameter counts in 128-bit, returned as int64 or 0 (unknown) when they do not fit.
int64_t ToParams(__int128 v) {
  return v <= 0 || v > static_cast<__int128>(INT64_MAX) ? 0 : static_cast<int64_t>(v);
}

// Parameters of a DeepSeek V2/V3 model: ModelConfig's count (embeddings, MLA projections and
// norms, dense or MoE feed-forward per layer with routed and shared experts and the router).
int64_t MlaParameters(const ModelDescription& d) {
  const int64_t n = d.config.NumParameters();
  return n > 0 ? n : 0;
}

// Stored weight bytes of a Hugging Face folder: the index's metadata.total_size, else the
// sizes of its *.safetensors files; 0 when there are none.
int64_t HfWeightBytes(const std::string& dir) {
  StatusOr<json> index = ReadJsonFile(dir + "/model.safetensors.index.json");
  if (index.ok() && index->contains("metadata") && (*index)["metadata"].is_object()) {
    const json& metadata = (*index)["metadata"];
    if (metadata.contains("total_size") && metadata["total_size"].is_number_integer()) {
      const int64_t total = metadata["total_size"].get<int64_t>();
      if (total > 0) return total;
    }
  }
  int64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".safetensors" && it->is_regular_file(ec)) {
      total += static_cast<int64_t>(it->file_size(ec));
    }
  }
  return total;
}

// A config.json's description as a PlanModel (see PlanModelFromHfConfig).
StatusOr<PlanModel> FromHfDescription(const StatusOr<ModelDescription>& described,
                                      const std::string& source,
                                      const std::string& default_name) {
  if (!described.ok()) return described.status().WithContext(source);
  const ModelDescription& d = *described;
  const std::string& arch = d.config.architecture;
  std::string name = default_name.empty() ? (arch.empty() ? "model" : arch) : default_name;
  if (!d.name_or_path.empty()) {
    name = d.name_or_path;
  } else if (default_name.empty() && !d.hf_architecture.empty()) {
    name = d.hf_architecture;
  }
  PlanModel m = PlanModelFromDescription(d, name, source, d.dtype.value_or(DType::kBF16));
  m.parameters_estimated = m.weights_estimated = true;
  return m;
}

// "GGUF tensors, mostly q8_0" for one type (or none); with several, each type's bytes:
// "GGUF tensors, mostly q4_k (q4_k 62.0 MiB, q6_k 25.3 MiB, q5_0 14.1 MiB, f32 0.2 MiB)".
std::string WeightsNote(const std::string& what, const WeightBytesByType& tally) {
  if (tally.by_type.empty()) return "no tensors in the " + what;
  std::string note = what + ", mostly " + tally.main_type();
  if (tally.by_type.size() == 1) return note;
  for (size_t i = 0; i < tally.by_type.size(); ++i) {
    note += (i == 0 ? " (" : ", ") + std::string(DTypeName(tally.by_type[i].first)) + " " +
            FormatWeightBytes(tally.by_type[i].second);
  }
  return note + ")";
}

// GGUF: the description from its metadata; weights from its tensor infos (no data is read).
StatusOr<PlanModel> PlanModelFromGguf(const std::string& path) {
  auto fail = [&](const Status& s) { return s.WithContext("GGUF '" + path + "'"); };
  StatusOr<std::unique_ptr<GgufFile>> opened = GgufFile::Open(path);
  if (!opened.ok()) return fail(opened.status());
  const GgufFile& file = **opened;
  StatusOr<ModelDescription> d = DescribeGgufModel(file, path);
  if (!d.ok()) return fail(d.status());
  // llama.cpp's default KV cache type (--cache-type-k/v f16), whatever the weights.
  PlanModel m = PlanModelFromDescription(*d, d->config.name, "GGUF " + path, DType::kF16);
  m.auto_dtype_reason = "llama.cpp's default for GGUF models";
  // Weights: the tensors as stored, by type (a q4_k_m file mixes q4_k, q6_k, ...).
  __int128 params = 0;
  for (const GgufTensorInfo& t : file.tensors()) {
    __int128 n = 1;
    for (int64_t dim : t.shape) n *= dim;
    params += n;
  }
  m.num_parameters = ToParams(params);
  m.shape = CostShape(*d, m.num_parameters);
  const WeightBytesByType tally = TallyWeightBytes(file.tensors());
  m.weight_bytes = tally.total_bytes;
  m.weight_bytes_by_type = tally.by_type;
  m.weights_note = WeightsNote("GGUF tensors", tally);
  return m;
}

// A checkpoint only LoadModel understands (llama2.c): its config and weights, f32 compute.
StatusOr<PlanModel> PlanModelFromLoader(const std::string& path) {
  KV_ASSIGN_OR_RETURN(LoadedModel loaded, LoadModel(path));
  ModelDescription d;
  d.config = loaded.config;
  PlanModel m = PlanModelFromDescription(d, d.config.name, loaded.format + " " + path,
                                         DType::kF32);
  const WeightBytesByType tally = TallyWeightBytes(loaded.tensors);
  m.weight_bytes = tally.total_bytes;
  m.weight_bytes_by_type = tally.by_type;
  m.weights_note = loaded.WeightTypeSummary() + " (" + loaded.format + " file)";
  return m;
}

// ---------------------------------------------------------------------------------------------
// Presets: published config.json values.

ModelDescription Dense(const char* name, const char* arch, int64_t vocab, int64_t hidden,
                       int64_t ffn, int64_t layers, int64_t heads, int64_t kv_heads,
                       int64_t head_dim, int64_t max_seq_len) {
  ModelDescription d;
  ModelConfig& c = d.config;
  c.name = name;
  c.architecture = arch;
  c.vocab_size = vocab;
  c.hidden_dim = hidden;
  c.ffn_dim = ffn;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.max_seq_len = max_seq_len;
  c.qkv_bias = std::string(arch) == "qwen2";
  return d;
}

// deepseek-ai/DeepSeek-V2-Lite config.json: MLA attention, MoE feed-forward.

}  // namespace

std::vector<std::string> PlanPresetNames() {
  return {"llama-3.3-70b",    "llama-3.1-8b", "mistral-7b",   "qwen2.5-7b",
          "deepseek-v2-lite", "deepseek-v3",  "smollm2-135m", "qwen2.5-0.5b",
          "llama-3.2-1b"};
}

StatusOr<PlanModel> PlanModelFromPreset(const std::string& name) {
  std::optional<ModelDescription> d;
  if (name == "llama-3.3-70b") {  // meta-llama/Llama-3.3-70B-Instruct
    d = Dense("Llama-3.3-70B", "llama", 128256, 8192, 28672, 80, 64, 8, 128, 131072);
  } else if (name == "llama-3.1-8b") {  // meta-llama/Llama-3.1-8B
    d = Dense("Llama-3.1-8B", "llama", 128256, 4096, 14336, 32, 32, 8, 128, 131072);
  } else if (name == "mistral-7b") {  // mistralai/Mistral-7B-v0.3 (no sliding window)
    d = Dense("Mistral-7B-v0.3", "mistral", 32768, 4096, 14336, 32, 32, 8, 128, 32768);
  } else if (name == "qwen2.5-7b") {  // Qwen/Qwen2.5-7B
    d = Dense("Qwen2.5-7B", "qwen2", 152064, 3584, 18944, 28, 28, 4, 128, 131072);
  } else if (name == "smollm2-135m" || name == "qwen2.5-0.5b" || name == "llama-3.2-1b" ||
             name == "deepseek-v2-lite" || name == "deepseek-v3") {
    // The shapes `kvserve mkmodel` also builds.
    KV_ASSIGN_OR_RETURN(ModelConfig c, SyntheticPresetConfig(name));
    d.emplace();
    d->config = std::move(c);
  } else {
    std::string known;
    for (const std::string& n : PlanPresetNames()) known += (known.empty() ? "" : ", ") + n;
    return InvalidArgumentError("unknown preset '" + name + "' (known: " + known + ")");
  }
  // Weights in the checkpoints' bf16.
  return PlanModelFromDescription(*d, d->config.name, "preset " + name, DType::kBF16);
}

int64_t EstimateParameters(const ModelDescription& d) {
  if (d.is_mla()) return MlaParameters(d);
  // ModelConfig's count without feed-forward for MoE models, plus every expert (of
  // expert_ffn_dim, else ffn_dim), the router and the shared experts.
  ModelConfig c = d.config;
  if (d.config.moe.num_experts > 0) c.ffn_dim = 0;
  const int64_t dense = c.NumParameters();
  if (dense <= 0) return 0;
  if (d.config.moe.num_experts == 0) return dense;
  const __int128 h = c.hidden_dim;
  const __int128 expert_ffn = d.config.moe.expert_ffn_dim > 0 ? d.config.moe.expert_ffn_dim : d.config.ffn_dim;
  const __int128 per_layer = 3 * h * expert_ffn * (d.config.moe.num_experts + d.config.moe.num_shared_experts) +
                             h * d.config.moe.num_experts + 3 * h * d.shared_expert_ffn_dim;
  return ToParams(dense + per_layer * c.num_layers);
}

PlanModel PlanModelFromDescription(const ModelDescription& d, const std::string& name,
                                   const std::string& source, DType dtype) {
  const ModelConfig& c = d.config;
  PlanModel m;
  m.name = name;
  m.source = source;
  m.architecture = c.architecture.empty() ? "unknown" : c.architecture;
  m.num_layers = c.num_layers;
  m.num_heads = c.num_heads;
  m.num_kv_heads = c.num_kv_heads;
  m.head_dim = c.head_dim;
  if (d.is_mla()) {  // DeepSeek V2/V3: the latent and the RoPE key are cached
    m.kv_layout = KvLayout::kMlaLatent;
    m.kv_lora_rank = d.config.mla.kv_lora_rank;
    m.qk_rope_head_dim = d.config.mla.qk_rope_head_dim;
  }
  m.hidden_dim = c.hidden_dim;
  m.vocab_size = c.vocab_size;
  m.max_context_tokens = c.max_seq_len;
  m.dtype = dtype;
  m.num_parameters = EstimateParameters(d);
  m.weight_bytes = WeightBytesAt(m.num_parameters, dtype);
  m.weights_note = DTypeName(dtype);
  m.shape = CostShape(d, m.num_parameters);
  return m;
}

cost::ModelShape CostShape(const ModelDescription& d, int64_t num_parameters) {
  const ModelConfig& c = d.config;
  cost::ModelShape s;
  s.name = c.name;
  s.num_layers = c.num_layers;
  s.hidden_dim = c.hidden_dim;
  s.num_heads = c.num_heads;
  if (d.is_mla()) {  // the absorbed form: MQA over the latent (+ the RoPE key)
    s.attention_qk_dim = c.mla.kv_lora_rank + c.mla.qk_rope_head_dim;
    s.attention_v_dim = c.mla.kv_lora_rank;
  } else {
    s.attention_qk_dim = s.attention_v_dim = c.head_dim;
  }
  s.sliding_window_tokens = d.sliding_window_tokens;
  const __int128 table = static_cast<__int128>(c.vocab_size) * c.hidden_dim;
  s.output_parameters = ToParams(table);
  __int128 routed = 0;
  if (c.moe.num_experts > 0) {
    const int64_t ffn = c.moe.expert_ffn_dim > 0 ? c.moe.expert_ffn_dim : c.ffn_dim;
    for (int64_t l = 0; l < c.num_layers; ++l) {
      s.num_moe_layers += c.moe.IsMoeLayer(l) && (d.moe_layer_freq <= 1 || l % d.moe_layer_freq == 0);
    }
    s.num_experts = c.moe.num_experts;
    s.num_experts_used = std::min(c.moe.num_experts_used, c.moe.num_experts);
    s.routed_expert_parameters = ToParams(3 * static_cast<__int128>(c.hidden_dim) * ffn);
    routed = static_cast<__int128>(s.num_moe_layers) * s.num_experts * s.routed_expert_parameters;
  }
  const __int128 layers =
      static_cast<__int128>(num_parameters) - table - (c.tied_embeddings ? 0 : table) - routed;
  s.layer_parameters = layers > 0 ? ToParams(layers) : 1;
  return s;
}

StatusOr<cost::Deployment> MakeDeployment(const PlanModel& m, const KvCacheSpec& kv,
                                          const cost::HardwareProfile& hardware,
                                          int num_devices, int64_t kv_budget_tokens) {
  if (m.num_parameters <= 0 || m.weight_bytes <= 0) {
    return InvalidArgumentError("cost model: the parameter count of '" + m.name + "' is unknown");
  }
  cost::Deployment d;
  d.model = m.shape;
  d.weight_bytes_per_parameter =
      static_cast<double>(m.weight_bytes) / static_cast<double>(m.num_parameters);
  d.weight_dtype = m.weight_bytes_by_type.empty() ? m.dtype : m.weight_bytes_by_type.front().first;
  d.kv = kv;
  d.kv_budget_tokens = kv_budget_tokens;
  d.tensor_parallel = num_devices;
  d.hardware = hardware;
  Status valid = cost::ValidateDeployment(d);
  if (!valid.ok()) return valid.WithContext(m.name);
  return d;
}

StatusOr<PlanModel> PlanModelFromHfConfig(const std::string& json_text, const std::string& source,
                                          const std::string& default_name) {
  return FromHfDescription(DescribeHfConfigText(json_text), source, default_name);
}

StatusOr<PlanModel> LoadPlanModel(const std::string& path) {
  std::error_code ec;
  const bool is_dir = fs::is_directory(path, ec);
  if (is_dir || fs::path(path).extension() == ".json") {
    std::string dir = is_dir ? path : fs::path(path).parent_path().string();
    if (dir.empty()) dir = ".";
    const std::string config = is_dir ? path + "/config.json" : path;
    const fs::path canonical = fs::weakly_canonical(fs::absolute(dir, ec), ec);
    KV_ASSIGN_OR_RETURN(const json j, ReadJsonFile(config));
    KV_ASSIGN_OR_RETURN(PlanModel m, FromHfDescription(DescribeHfConfig(j), config,
                                                       ec ? "" : canonical.filename().string()));
    const int64_t stored = HfWeightBytes(dir);
    if (stored > 0) {
      m.weight_bytes = stored;
      m.weights_note = "safetensors files";
      m.weights_estimated = false;
    }
    return m;
  }
  if (IsGgufFile(path)) return PlanModelFromGguf(path);
  if (!fs::exists(path, ec)) return NotFoundError("cannot open '" + path + "'");
  return PlanModelFromLoader(path);
}

Status ValidatePlanModel(const PlanModel& m) {
  KV_RETURN_IF_ERROR(CheckRange("num_layers", m.num_layers, 1, kMaxLayers));
  if (m.kv_layout == KvLayout::kSeparateKv) {
    KV_RETURN_IF_ERROR(CheckRange("num_kv_heads", m.num_kv_heads, 1, kMaxHeads));
    KV_RETURN_IF_ERROR(CheckRange("head_dim", m.head_dim, 1, kMaxHeadDim));
  } else {
    KV_RETURN_IF_ERROR(CheckRange("kv_lora_rank", m.kv_lora_rank, 1, kMaxLatentDim));
    KV_RETURN_IF_ERROR(CheckRange("qk_rope_head_dim", m.qk_rope_head_dim, 0, kMaxHeadDim));
  }
  return OkStatus();
}

KvCacheSpec PlanKvCacheSpec(const PlanModel& m, DType dtype, int64_t block_size) {
  if (m.kv_layout == KvLayout::kMlaLatent) {
    return KvCacheSpec::MlaLatent(m.num_layers, m.kv_lora_rank, m.qk_rope_head_dim, dtype,
                                  block_size);
  }
  KvCacheSpec spec;
  spec.layout = m.kv_layout;
  spec.num_layers = m.num_layers;
  spec.num_kv_heads = m.num_kv_heads;
  spec.head_dim = m.head_dim;
  spec.dtype = dtype;
  spec.block_size = block_size;
  return spec;
}

int64_t WeightBytesAt(int64_t num_parameters, DType dtype) {
  const double bytes_per_parameter =
      static_cast<double>(DTypeBlockBytes(dtype)) / static_cast<double>(DTypeBlockElems(dtype));
  return static_cast<int64_t>(
      std::llround(static_cast<double>(num_parameters) * bytes_per_parameter));
}

StatusOr<PlanModel> ResolvePlanModel(const std::string& preset, const std::string& model_path) {
  if (preset.empty() == model_path.empty()) {
    return InvalidArgumentError("pass exactly one of --preset NAME and --model PATH");
  }
  return preset.empty() ? LoadPlanModel(model_path) : PlanModelFromPreset(preset);
}

}  // namespace kvserve::plan

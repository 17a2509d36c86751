// The models `kvserve plan` plans for: presets, Hugging Face configs, GGUF metadata (see
// plan_model.h).
#include "cli/plan_model.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <tuple>

#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "model/model_loader.h"
#include "model/synthetic.h"

namespace kvserve::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Ranges the planner accepts. They admit every real model and keep the parameter estimates
// in range; the per-request products are still computed with overflow checks.
constexpr int64_t kMaxLayers = int64_t{1} << 12;
constexpr int64_t kMaxHeads = int64_t{1} << 12;
constexpr int64_t kMaxHeadDim = int64_t{1} << 14;
constexpr int64_t kMaxLatentDim = int64_t{1} << 16;
constexpr int64_t kMaxWidth = int64_t{1} << 22;  // hidden, intermediate sizes
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxExperts = int64_t{1} << 14;
constexpr int64_t kMaxContext = kPlanMaxContextTokens;
constexpr int64_t kMaxJsonBytes = int64_t{64} << 20;

std::string Num(int64_t v) { return std::to_string(v); }

Status CheckRange(const std::string& what, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    return InvalidArgumentError(what + " = " + Num(value) + " is out of range [" + Num(lo) + ", " +
                                Num(hi) + "]");
  }
  return OkStatus();
}

// Parameter counts in 128-bit, returned as int64 or 0 (unknown) when they do not fit.
int64_t ToParams(__int128 v) {
  return v <= 0 || v > static_cast<__int128>(INT64_MAX) ? 0 : static_cast<int64_t>(v);
}

// A dense Llama-family model from its ModelConfig (parameters from ModelConfig::NumParameters).
PlanModel FromModelConfig(const ModelConfig& c, const std::string& source, DType dtype) {
  PlanModel m;
  m.name = c.name;
  m.source = source;
  m.architecture = c.architecture;
  m.num_layers = c.num_layers;
  m.num_heads = c.num_heads;
  m.num_kv_heads = c.num_kv_heads;
  m.head_dim = c.head_dim != 0 ? c.head_dim : (c.num_heads > 0 ? c.hidden_dim / c.num_heads : 0);
  m.hidden_dim = c.hidden_dim;
  m.vocab_size = c.vocab_size;
  m.max_context_tokens = c.max_seq_len;
  m.dtype = dtype;
  const int64_t params = c.NumParameters();
  m.num_parameters = params > 0 ? params : 0;
  m.weight_bytes = WeightBytesAt(m.num_parameters, dtype);
  m.weights_note = DTypeName(dtype);
  return m;
}

ModelConfig DenseConfig(const char* name, const char* arch, int64_t vocab, int64_t hidden,
                        int64_t ffn, int64_t layers, int64_t heads, int64_t kv_heads,
                        int64_t head_dim, int64_t max_seq_len, bool tied) {
  ModelConfig c;
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
  c.tied_embeddings = tied;
  c.qkv_bias = std::string(arch) == "qwen2";
  return c;
}

// DeepSeek V2/V3 shapes (MLA attention, MoE feed-forward), as in their config.json.
struct DeepSeekShape {
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0;
  int64_t ffn = 0;      // intermediate_size (dense layers)
  int64_t moe_ffn = 0;  // moe_intermediate_size (each expert)
  int64_t routed_experts = 0, shared_experts = 0;
  int64_t first_k_dense = 0, moe_layer_freq = 1;
  int64_t q_lora_rank = 0;  // 0: q_proj without low-rank compression (V2-Lite)
  int64_t kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  bool tied = false;
};

// Parameters of a DeepSeek V2/V3 model: embeddings, MLA projections and norms, dense or MoE
// feed-forward per layer (routed + shared experts + router). Multi-token-prediction layers
// (V3's num_nextn_predict_layers) are not counted.
int64_t DeepSeekParameters(const DeepSeekShape& s) {
  const __int128 h = s.hidden;
  const __int128 qk_head = s.qk_nope_head_dim + s.qk_rope_head_dim;
  __int128 attn = 0;
  if (s.q_lora_rank > 0) {
    attn += h * s.q_lora_rank + s.q_lora_rank +
            static_cast<__int128>(s.q_lora_rank) * s.heads * qk_head;
  } else {
    attn += h * s.heads * qk_head;
  }
  attn += h * (s.kv_lora_rank + s.qk_rope_head_dim) + s.kv_lora_rank;  // kv_a_proj + norm
  attn += static_cast<__int128>(s.kv_lora_rank) * s.heads * (s.qk_nope_head_dim + s.v_head_dim);
  attn += static_cast<__int128>(s.heads) * s.v_head_dim * h;  // o_proj
  const __int128 dense_mlp = 3 * h * s.ffn;
  const __int128 moe_mlp =
      3 * h * s.moe_ffn * (s.routed_experts + s.shared_experts) + h * s.routed_experts;
  __int128 total = h * s.vocab * (s.tied ? 1 : 2) + h;  // embeddings (+ lm_head), final norm
  for (int64_t i = 0; i < s.layers; ++i) {
    const bool moe = s.routed_experts > 0 && i >= s.first_k_dense &&
                     (s.moe_layer_freq <= 1 || i % s.moe_layer_freq == 0);
    total += attn + 2 * h + (moe ? moe_mlp : dense_mlp);
  }
  return ToParams(total);
}

PlanModel FromDeepSeek(const DeepSeekShape& s, const std::string& name, const std::string& arch,
                       int64_t max_context, const std::string& source, DType dtype) {
  PlanModel m;
  m.name = name;
  m.source = source;
  m.architecture = arch;
  m.num_layers = s.layers;
  m.num_heads = s.heads;
  m.num_kv_heads = s.heads;
  m.head_dim = s.qk_nope_head_dim + s.qk_rope_head_dim;
  m.kv_layout = KvLayout::kMlaLatent;
  m.kv_lora_rank = s.kv_lora_rank;
  m.qk_rope_head_dim = s.qk_rope_head_dim;
  m.hidden_dim = s.hidden;
  m.vocab_size = s.vocab;
  m.max_context_tokens = max_context;
  m.dtype = dtype;
  m.num_parameters = DeepSeekParameters(s);
  m.weight_bytes = WeightBytesAt(m.num_parameters, dtype);
  m.weights_note = DTypeName(dtype);
  return m;
}

// deepseek-ai/DeepSeek-V2-Lite config.json.
DeepSeekShape DeepSeekV2Lite() {
  DeepSeekShape s;
  s.vocab = 102400;
  s.hidden = 2048;
  s.layers = 27;
  s.heads = 16;
  s.ffn = 10944;
  s.moe_ffn = 1408;
  s.routed_experts = 64;
  s.shared_experts = 2;
  s.first_k_dense = 1;
  s.moe_layer_freq = 1;
  s.q_lora_rank = 0;
  s.kv_lora_rank = 512;
  s.qk_nope_head_dim = 128;
  s.qk_rope_head_dim = 64;
  s.v_head_dim = 128;
  return s;
}

// ---------------------------------------------------------------------------------------------
// Hugging Face config.json.

StatusOr<int64_t> JsonInt(const json& j, const char* key, int64_t def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_number_integer()) {
    return InvalidArgumentError(std::string("config.json: '") + key + "' must be an integer");
  }
  return j[key].get<int64_t>();
}

// torch_dtype (or dtype in newer transformers) -> the model dtype; bf16 when absent or unknown.
DType HfDtype(const json& j) {
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (j.contains(key) && j[key].is_string()) {
      const std::string name = j[key].get<std::string>();
      if (name == "float32" || name == "float16" || name == "bfloat16") {
        StatusOr<DType> d = ParseKvCacheDtype(name, DType::kBF16);
        if (d.ok()) return *d;
      }
    }
  }
  return DType::kBF16;
}

StatusOr<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open '" + path + "'");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0 || size > kMaxJsonBytes) {
    return InvalidArgumentError("'" + path + "' is too large for a JSON config");
  }
  in.seekg(0);
  std::string text(static_cast<size_t>(size), '\0');
  in.read(text.data(), size);
  return text;
}

// Stored weight bytes of a Hugging Face folder: the index's metadata.total_size, else the
// sizes of its *.safetensors files; 0 when there are none.
int64_t HfWeightBytes(const std::string& dir) {
  StatusOr<std::string> index = ReadSmallFile(dir + "/model.safetensors.index.json");
  if (index.ok()) {
    json j = json::parse(*index, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && j.contains("metadata") && j["metadata"].is_object() &&
        j["metadata"].contains("total_size") && j["metadata"]["total_size"].is_number_integer()) {
      const int64_t total = j["metadata"]["total_size"].get<int64_t>();
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

// ---------------------------------------------------------------------------------------------
// GGUF (metadata and tensor infos only; no tensor data is read).

StatusOr<PlanModel> PlanModelFromGguf(const std::string& path) {
  auto fail = [&](const Status& s) { return s.WithContext("GGUF '" + path + "'"); };
  StatusOr<std::unique_ptr<GgufFile>> opened = GgufFile::Open(path);
  if (!opened.ok()) return fail(opened.status());
  const GgufFile& file = **opened;
  StatusOr<std::string> arch = file.GetString("general.architecture");
  if (!arch.ok()) return fail(arch.status());
  auto get_int = [&](const std::string& key, int64_t def, bool required) -> StatusOr<int64_t> {
    StatusOr<int64_t> v = file.GetInt(*arch + "." + key);
    if (v.ok()) return *v;
    if (v.status().code() == StatusCode::kNotFound && !required) return def;
    return v.status();
  };
  PlanModel m;
  m.source = "GGUF " + path;
  m.architecture = *arch;
  StatusOr<std::string> name = file.GetString("general.name");
  m.name = name.ok() ? *name : fs::path(path).filename().string();
#define KV_PLAN_GGUF_INT(field, key, def, required)     \
  {                                                     \
    StatusOr<int64_t> v_ = get_int(key, def, required); \
    if (!v_.ok()) return fail(v_.status());             \
    m.field = *v_;                                      \
  }
  KV_PLAN_GGUF_INT(num_layers, "block_count", 0, true);
  KV_PLAN_GGUF_INT(num_heads, "attention.head_count", 0, true);
  KV_PLAN_GGUF_INT(num_kv_heads, "attention.head_count_kv", m.num_heads, false);
  KV_PLAN_GGUF_INT(hidden_dim, "embedding_length", 0, false);
  KV_PLAN_GGUF_INT(max_context_tokens, "context_length", 0, false);
  KV_PLAN_GGUF_INT(head_dim, "attention.key_length",
                   m.num_heads > 0 ? m.hidden_dim / m.num_heads : 0, false);
  KV_PLAN_GGUF_INT(kv_lora_rank, "attention.kv_lora_rank", 0, false);
  if (m.kv_lora_rank > 0) {  // deepseek2: MLA, the latent plus the RoPE key per token
    m.kv_layout = KvLayout::kMlaLatent;
    KV_PLAN_GGUF_INT(qk_rope_head_dim, "rope.dimension_count", 0, true);
  }
  KV_PLAN_GGUF_INT(vocab_size, "vocab_size", 0, false);
#undef KV_PLAN_GGUF_INT
  if (m.vocab_size == 0) {
    if (const GgufTensorInfo* embd = file.FindTensor("token_embd.weight");
        embd != nullptr && !embd->shape.empty()) {
      m.vocab_size = embd->shape[0];
    }
  }
  // Weights: the tensors as stored; the note names the most common type by bytes.
  __int128 params = 0;
  int64_t bytes = 0;
  std::map<std::string, int64_t> bytes_by_type;
  for (const GgufTensorInfo& t : file.tensors()) {
    __int128 n = 1;
    for (int64_t d : t.shape) n *= d;
    params += n;
    bytes += static_cast<int64_t>(t.num_bytes);
    bytes_by_type[DTypeName(t.dtype)] += static_cast<int64_t>(t.num_bytes);
  }
  m.num_parameters = ToParams(params);
  m.weight_bytes = bytes;
  std::string main_type;
  int64_t main_bytes = -1;
  for (const auto& [type, b] : bytes_by_type) {
    if (b > main_bytes) main_type = type, main_bytes = b;
  }
  m.weights_note =
      main_type.empty() ? "no tensors in the GGUF" : "GGUF tensors, mostly " + main_type;
  // llama.cpp's default KV cache type (--cache-type-k/v f16), whatever the weights.
  m.dtype = DType::kF16;
  m.auto_dtype_reason = "llama.cpp's default for GGUF models";
  return m;
}

// A checkpoint only LoadModel understands (llama2.c): its config and weights, f32 compute.
StatusOr<PlanModel> PlanModelFromLoader(const std::string& path) {
  KV_ASSIGN_OR_RETURN(LoadedModel loaded, LoadModel(path));
  PlanModel m = FromModelConfig(loaded.config, loaded.format + " " + path, DType::kF32);
  m.weight_bytes = loaded.WeightBytes();
  m.weights_note = loaded.WeightTypeSummary() + " (" + loaded.format + " file)";
  return m;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Models.

std::vector<std::string> PlanPresetNames() {
  return {"llama-3.3-70b",    "llama-3.1-8b", "mistral-7b",   "qwen2.5-7b",
          "deepseek-v2-lite", "smollm2-135m", "qwen2.5-0.5b", "llama-3.2-1b"};
}

StatusOr<PlanModel> PlanModelFromPreset(const std::string& name) {
  const std::string source = "preset " + name;
  // Published config.json values; weights in the checkpoints' bf16.
  if (name == "llama-3.3-70b") {  // meta-llama/Llama-3.3-70B-Instruct
    return FromModelConfig(
        DenseConfig("Llama-3.3-70B", "llama", 128256, 8192, 28672, 80, 64, 8, 128, 131072, false),
        source, DType::kBF16);
  }
  if (name == "llama-3.1-8b") {  // meta-llama/Llama-3.1-8B
    return FromModelConfig(
        DenseConfig("Llama-3.1-8B", "llama", 128256, 4096, 14336, 32, 32, 8, 128, 131072, false),
        source, DType::kBF16);
  }
  if (name == "mistral-7b") {  // mistralai/Mistral-7B-v0.3 (no sliding window)
    return FromModelConfig(
        DenseConfig("Mistral-7B-v0.3", "mistral", 32768, 4096, 14336, 32, 32, 8, 128, 32768, false),
        source, DType::kBF16);
  }
  if (name == "qwen2.5-7b") {  // Qwen/Qwen2.5-7B
    return FromModelConfig(
        DenseConfig("Qwen2.5-7B", "qwen2", 152064, 3584, 18944, 28, 28, 4, 128, 131072, false),
        source, DType::kBF16);
  }
  if (name == "deepseek-v2-lite") {  // deepseek-ai/DeepSeek-V2-Lite
    return FromDeepSeek(DeepSeekV2Lite(), "DeepSeek-V2-Lite", "deepseek_v2", 163840, source,
                        DType::kBF16);
  }
  // The shapes `kvserve mkmodel` also builds.
  if (name == "smollm2-135m" || name == "qwen2.5-0.5b" || name == "llama-3.2-1b") {
    KV_ASSIGN_OR_RETURN(ModelConfig c, SyntheticPresetConfig(name));
    return FromModelConfig(c, source, DType::kBF16);
  }
  std::string known;
  for (const std::string& n : PlanPresetNames()) known += (known.empty() ? "" : ", ") + n;
  return InvalidArgumentError("unknown preset '" + name + "' (known: " + known + ")");
}

StatusOr<PlanModel> PlanModelFromHfConfig(const std::string& json_text, const std::string& source,
                                          const std::string& default_name) {
  auto fail = [&](const Status& s) { return s.WithContext(source); };
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return fail(InvalidArgumentError("not a JSON object"));
  }
  // Multimodal configs keep the decoder's fields in text_config.
  const json& j = !root.contains("num_hidden_layers") && root.contains("text_config") &&
                          root["text_config"].is_object()
                      ? root["text_config"]
                      : root;
  std::string arch;
  if (j.contains("model_type") && j["model_type"].is_string()) {
    arch = j["model_type"].get<std::string>();
  } else if (root.contains("model_type") && root["model_type"].is_string()) {
    arch = root["model_type"].get<std::string>();
  }
  std::string name = default_name.empty() ? (arch.empty() ? "model" : arch) : default_name;
  if (root.contains("_name_or_path") && root["_name_or_path"].is_string() &&
      !root["_name_or_path"].get<std::string>().empty()) {
    name = root["_name_or_path"].get<std::string>();
  } else if (default_name.empty() && root.contains("architectures") &&
             root["architectures"].is_array() && !root["architectures"].empty() &&
             root["architectures"][0].is_string()) {
    name = root["architectures"][0].get<std::string>();
  }
  const DType dtype = HfDtype(root.contains("torch_dtype") || root.contains("dtype") ? root : j);
#define KV_PLAN_JSON_INT(var, key, def)          \
  int64_t var;                                   \
  {                                              \
    StatusOr<int64_t> v_ = JsonInt(j, key, def); \
    if (!v_.ok()) return fail(v_.status());      \
    var = *v_;                                   \
  }
  KV_PLAN_JSON_INT(layers, "num_hidden_layers", 0);
  KV_PLAN_JSON_INT(heads, "num_attention_heads", 0);
  KV_PLAN_JSON_INT(kv_heads, "num_key_value_heads", heads);
  KV_PLAN_JSON_INT(hidden, "hidden_size", 0);
  KV_PLAN_JSON_INT(head_dim, "head_dim", heads > 0 ? hidden / heads : 0);
  KV_PLAN_JSON_INT(ffn, "intermediate_size", 0);
  KV_PLAN_JSON_INT(vocab, "vocab_size", 0);
  KV_PLAN_JSON_INT(max_context, "max_position_embeddings", 0);
  KV_PLAN_JSON_INT(kv_lora_rank, "kv_lora_rank", 0);
  KV_PLAN_JSON_INT(moe_ffn, "moe_intermediate_size", 0);
  KV_PLAN_JSON_INT(local_experts, "num_local_experts", 0);
  KV_PLAN_JSON_INT(num_experts, "num_experts", 0);
  KV_PLAN_JSON_INT(shared_ffn, "shared_expert_intermediate_size", 0);
  const bool tied = j.contains("tie_word_embeddings") && j["tie_word_embeddings"].is_boolean()
                        ? j["tie_word_embeddings"].get<bool>()
                        : false;
  if (layers <= 0)
    return fail(InvalidArgumentError("num_hidden_layers is missing or not positive"));
  if (heads <= 0)
    return fail(InvalidArgumentError("num_attention_heads is missing or not positive"));
  const std::tuple<const char*, int64_t, int64_t> ranges[] = {
      {"num_hidden_layers", layers, kMaxLayers},
      {"num_attention_heads", heads, kMaxHeads},
      {"num_key_value_heads", kv_heads, kMaxHeads},
      {"hidden_size", hidden, kMaxWidth},
      {"head_dim", head_dim, kMaxHeadDim},
      {"intermediate_size", ffn, kMaxWidth},
      {"moe_intermediate_size", moe_ffn, kMaxWidth},
      {"shared_expert_intermediate_size", shared_ffn, kMaxWidth},
      {"num_local_experts", local_experts, kMaxExperts},
      {"num_experts", num_experts, kMaxExperts},
      {"vocab_size", vocab, kMaxVocab},
      {"kv_lora_rank", kv_lora_rank, kMaxLatentDim},
      {"max_position_embeddings", max_context, kMaxContext}};
  for (const auto& [what, v, hi] : ranges) {
    Status s = CheckRange(what, v, 0, hi);
    if (!s.ok()) return fail(s);
  }

  if (kv_lora_rank > 0) {  // DeepSeek V2/V3 MLA: the latent and the RoPE key are cached
    DeepSeekShape s;
    s.vocab = vocab;
    s.hidden = hidden;
    s.layers = layers;
    s.heads = heads;
    s.ffn = ffn;
    s.moe_ffn = moe_ffn;
    s.kv_lora_rank = kv_lora_rank;
    s.tied = tied;
    const std::tuple<int64_t*, const char*, int64_t, int64_t> fields[] = {
        {&s.qk_rope_head_dim, "qk_rope_head_dim", 64, kMaxHeadDim},
        {&s.qk_nope_head_dim, "qk_nope_head_dim", 128, kMaxHeadDim},
        {&s.v_head_dim, "v_head_dim", 128, kMaxHeadDim},
        {&s.q_lora_rank, "q_lora_rank", 0, kMaxLatentDim},
        {&s.routed_experts, "n_routed_experts", 0, kMaxExperts},
        {&s.shared_experts, "n_shared_experts", 0, kMaxExperts},
        {&s.first_k_dense, "first_k_dense_replace", 0, kMaxLayers},
        {&s.moe_layer_freq, "moe_layer_freq", 1, kMaxLayers}};
    for (const auto& [var, key, def, hi] : fields) {
      StatusOr<int64_t> v = JsonInt(j, key, def);
      if (!v.ok()) return fail(v.status());
      if (Status st = CheckRange(key, *v, 0, hi); !st.ok()) return fail(st);
      *var = *v;
    }
    PlanModel m = FromDeepSeek(s, name, arch, max_context, source, dtype);
    m.parameters_estimated = m.weights_estimated = true;
    return m;
  }

  ModelConfig c;
  c.name = name;
  c.architecture = arch.empty() ? "unknown" : arch;
  c.vocab_size = vocab;
  c.hidden_dim = hidden;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.max_seq_len = max_context;
  c.tied_embeddings = tied;
  c.qkv_bias = arch == "qwen2" || arch == "qwen2_moe" ||
               (j.contains("attention_bias") && j["attention_bias"].is_boolean() &&
                j["attention_bias"].get<bool>());
  const int64_t experts = std::max(local_experts, num_experts);
  // Dense: ModelConfig's count. MoE: the count without feed-forward, plus every expert (of
  // moe_intermediate_size, else intermediate_size), the router and a shared expert.
  c.ffn_dim = experts > 0 ? 0 : ffn;
  PlanModel m = FromModelConfig(c, source, dtype);
  if (experts > 0 && m.num_parameters > 0) {
    const __int128 h = hidden;
    const __int128 per_layer =
        3 * h * (moe_ffn > 0 ? moe_ffn : ffn) * experts + h * experts + 3 * h * shared_ffn;
    m.num_parameters = ToParams(m.num_parameters + per_layer * layers);
    m.weight_bytes = WeightBytesAt(m.num_parameters, dtype);
  }
  m.parameters_estimated = m.weights_estimated = true;
  return m;
}

StatusOr<PlanModel> LoadPlanModel(const std::string& path) {
  if (IsDirectory(path) || fs::path(path).extension() == ".json") {
    std::string dir = IsDirectory(path) ? path : fs::path(path).parent_path().string();
    if (dir.empty()) dir = ".";
    const std::string config = IsDirectory(path) ? path + "/config.json" : path;
    std::error_code ec;
    const fs::path canonical = fs::weakly_canonical(fs::absolute(dir, ec), ec);
    KV_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(config));
    KV_ASSIGN_OR_RETURN(
        PlanModel m, PlanModelFromHfConfig(text, config, ec ? "" : canonical.filename().string()));
    const int64_t stored = HfWeightBytes(dir);
    if (stored > 0) {
      m.weight_bytes = stored;
      m.weights_note = "safetensors files";
      m.weights_estimated = false;
    }
    return m;
  }
  if (IsGgufFile(path)) return PlanModelFromGguf(path);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return NotFoundError("cannot open '" + path + "'");
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
  KvCacheSpec spec;
  spec.layout = m.kv_layout;
  spec.num_layers = m.num_layers;
  if (m.kv_layout == KvLayout::kSeparateKv) {
    spec.num_kv_heads = m.num_kv_heads;
    spec.head_dim = m.head_dim;
  } else {
    spec.latent_dim = m.kv_lora_rank;
    spec.rope_dim = m.qk_rope_head_dim;
  }
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

}  // namespace kvserve::cli

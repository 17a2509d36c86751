// The readers of model descriptions: Hugging Face config.json and GGUF metadata (see
// model_description.h).
#include "model/model_description.h"

#include <algorithm>
#include <fstream>
#include <tuple>

#include <nlohmann/json.hpp>

namespace kvserve {
namespace {

using nlohmann::json;

constexpr int64_t kMaxJsonBytes = int64_t{64} << 20;

// Ranges DescribeHfConfig accepts. They admit every real model and keep parameter estimates
// over them in range.
constexpr int64_t kMaxLayers = int64_t{1} << 12;
constexpr int64_t kMaxHeads = int64_t{1} << 12;
constexpr int64_t kMaxHeadDim = int64_t{1} << 14;
constexpr int64_t kMaxLatentDim = int64_t{1} << 16;
constexpr int64_t kMaxWidth = int64_t{1} << 22;  // hidden, intermediate sizes
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxExperts = int64_t{1} << 14;

// ---------------------------------------------------------------------------------------------
// Hugging Face config.json.

// Optional integer field: `def` when absent or null; an error when of another type.
StatusOr<int64_t> IntField(const json& j, const char* key, int64_t def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_number_integer()) {
    return InvalidArgumentError(std::string("config.json: '") + key + "' must be an integer");
  }
  return j[key].get<int64_t>();
}

// An integer field as IntField, also checked against [0, max].
StatusOr<int64_t> IntInRange(const json& j, const char* key, int64_t def, int64_t max) {
  KV_ASSIGN_OR_RETURN(const int64_t v, IntField(j, key, def));
  if (v < 0 || v > max) {
    return InvalidArgumentError(std::string(key) + " = " + std::to_string(v) +
                                " is out of range [0, " + std::to_string(max) + "]");
  }
  return v;
}

StatusOr<double> FloatField(const json& j, const char* key, double def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_number()) {
    return InvalidArgumentError(std::string("config.json: '") + key + "' must be a number");
  }
  return j[key].get<double>();
}

bool BoolField(const json& j, const char* key, bool def) {
  if (!j.contains(key) || !j[key].is_boolean()) return def;
  return j[key].get<bool>();
}

std::string StringField(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

// torch_dtype (or dtype in newer transformers), when one of the float types.
std::optional<DType> HfDtype(const json& j) {
  for (const char* key : {"torch_dtype", "dtype"}) {
    const std::string name = StringField(j, key);
    if (name == "float32") return DType::kF32;
    if (name == "float16") return DType::kF16;
    if (name == "bfloat16") return DType::kBF16;
  }
  return std::nullopt;
}

// rope_scaling: {"rope_type" (or "type"): ..., "factor": ..., llama3 parameters}.
Status ParseHfRopeScaling(const json& j, ModelDescription* d) {
  if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return OkStatus();
  const json& rs = j["rope_scaling"];
  if (!rs.is_object()) return InvalidArgumentError("config.json: rope_scaling must be an object");
  d->rope_scaling_type = StringField(rs, "rope_type");
  if (d->rope_scaling_type.empty()) d->rope_scaling_type = StringField(rs, "type");
  RopeOptions& rope = d->config.rope;
  KV_ASSIGN_OR_RETURN(const double factor, FloatField(rs, "factor", 1.0));
  if (d->rope_scaling_type == "linear") {
    rope.scaling = RopeScalingType::kLinear;
    rope.scaling_factor = static_cast<float>(factor);
  } else if (d->rope_scaling_type == "llama3") {
    rope.scaling = RopeScalingType::kLlama3;
    rope.scaling_factor = static_cast<float>(factor);
    KV_ASSIGN_OR_RETURN(const double low, FloatField(rs, "low_freq_factor", 1.0));
    KV_ASSIGN_OR_RETURN(const double high, FloatField(rs, "high_freq_factor", 4.0));
    KV_ASSIGN_OR_RETURN(rope.llama3_original_max_positions,
                        IntField(rs, "original_max_position_embeddings", 8192));
    if (!(high > low) || low <= 0.0) {
      return InvalidArgumentError(
          "config.json: llama3 rope_scaling needs high_freq_factor > low_freq_factor > 0");
    }
    rope.llama3_low_freq_factor = static_cast<float>(low);
    rope.llama3_high_freq_factor = static_cast<float>(high);
  } else if (d->rope_scaling_type == "yarn") {  // DeepSeek V2/V3
    rope.scaling = RopeScalingType::kYarn;
    rope.scaling_factor = static_cast<float>(factor);
    KV_ASSIGN_OR_RETURN(rope.yarn_original_max_positions,
                        IntField(rs, "original_max_position_embeddings", 4096));
    KV_ASSIGN_OR_RETURN(const double beta_fast, FloatField(rs, "beta_fast", 32.0));
    KV_ASSIGN_OR_RETURN(const double beta_slow, FloatField(rs, "beta_slow", 1.0));
    KV_ASSIGN_OR_RETURN(const double mscale_all_dim, FloatField(rs, "mscale_all_dim", 0.0));
    rope.yarn_beta_fast = static_cast<float>(beta_fast);
    rope.yarn_beta_slow = static_cast<float>(beta_slow);
    d->config.mla.yarn_log_multiplier = static_cast<float>(mscale_all_dim);
    if (!(factor >= 1.0) || rope.yarn_original_max_positions <= 0 || !(beta_fast > beta_slow) ||
        !(beta_slow > 0.0)) {
      return InvalidArgumentError("config.json: yarn rope_scaling needs factor >= 1, "
                                  "original_max_position_embeddings > 0, beta_fast > beta_slow > 0");
    }
  }
  return OkStatus();
}

// DeepSeek V2/V3 MLA dimensions and the mixture-of-experts fields of any family.
Status ParseHfMlaAndExperts(const json& j, ModelDescription* d) {
  KV_ASSIGN_OR_RETURN(d->config.mla.kv_lora_rank, IntInRange(j, "kv_lora_rank", 0, kMaxLatentDim));
  const bool mla = d->config.mla.kv_lora_rank > 0;  // DeepSeek's defaults apply only to MLA configs
  KV_ASSIGN_OR_RETURN(int64_t local_experts,
                      IntInRange(j, "num_local_experts", 0, kMaxExperts));  // Mixtral
  KV_ASSIGN_OR_RETURN(int64_t experts, IntInRange(j, "num_experts", 0, kMaxExperts));  // Qwen
  const std::tuple<int64_t*, const char*, int64_t, int64_t> fields[] = {
      {&d->config.mla.qk_rope_head_dim, "qk_rope_head_dim", mla ? 64 : 0, kMaxHeadDim},
      {&d->config.mla.qk_nope_head_dim, "qk_nope_head_dim", mla ? 128 : 0, kMaxHeadDim},
      {&d->config.mla.v_head_dim, "v_head_dim", mla ? 128 : 0, kMaxHeadDim},
      {&d->config.mla.q_lora_rank, "q_lora_rank", 0, kMaxLatentDim},
      {&d->config.moe.num_experts, "n_routed_experts", std::max(local_experts, experts), kMaxExperts},
      {&d->config.moe.num_shared_experts, "n_shared_experts", 0, kMaxExperts},
      {&d->config.moe.expert_ffn_dim, "moe_intermediate_size", 0, kMaxWidth},
      {&d->shared_expert_ffn_dim, "shared_expert_intermediate_size", 0, kMaxWidth},
      {&d->config.moe.first_dense_layers, "first_k_dense_replace", 0, kMaxLayers},
      {&d->moe_layer_freq, "moe_layer_freq", 1, kMaxLayers}};
  for (const auto& [field, key, def, max] : fields) {
    KV_ASSIGN_OR_RETURN(*field, IntInRange(j, key, def, max));
  }
  MoeConfig& moe = d->config.moe;
  int64_t groups = 1, groups_used = 1;
  KV_ASSIGN_OR_RETURN(moe.num_experts_used, IntInRange(j, "num_experts_per_tok", 0, kMaxExperts));
  KV_ASSIGN_OR_RETURN(groups, IntInRange(j, "n_group", 1, kMaxExperts));
  KV_ASSIGN_OR_RETURN(groups_used, IntInRange(j, "topk_group", 1, kMaxExperts));
  moe.num_groups = std::max<int64_t>(1, groups);
  moe.num_groups_used = moe.num_groups > 1 ? std::max<int64_t>(1, groups_used) : 1;
  moe.gating = StringField(j, "scoring_func") == "sigmoid" ? ExpertGating::kSigmoid
                                                            : ExpertGating::kSoftmax;
  moe.normalize_weights = BoolField(j, "norm_topk_prob", false);
  moe.selection_bias = StringField(j, "topk_method") == "noaux_tc";  // e_score_correction_bias
  KV_ASSIGN_OR_RETURN(const double scale, FloatField(j, "routed_scaling_factor", 1.0));
  moe.weights_scale = static_cast<float>(scale);
  if (mla) {
    d->config.head_dim = d->config.mla.qk_nope_head_dim + d->config.mla.qk_rope_head_dim;
    d->config.num_kv_heads = d->config.num_heads;  // HF states it as num_attention_heads
    // DeepSeek's modeling code de-interleaves q_pe and k_pe before rotate_half: its weights
    // rotate adjacent pairs (and llama.cpp's converter copies them unpermuted).
    d->config.rope.layout = RopeLayout::kInterleaved;
  }
  return OkStatus();
}

// ---------------------------------------------------------------------------------------------
// GGUF.

// <arch>.<key> as an integer: `def` when absent (an error when `required`), an error when of
// another type.
StatusOr<int64_t> GgufInt(const GgufFile& file, const std::string& arch, const char* key,
                          int64_t def, bool required = false) {
  StatusOr<int64_t> v = file.GetInt(arch + "." + key);
  if (v.ok()) return *v;
  if (v.status().code() == StatusCode::kNotFound && !required) return def;
  return v.status();
}

StatusOr<double> GgufFloat(const GgufFile& file, const std::string& arch, const char* key,
                           double def) {
  StatusOr<double> v = file.GetFloat(arch + "." + key);
  if (v.ok()) return *v;
  if (v.status().code() == StatusCode::kNotFound) return def;
  return v.status();
}

// DeepSeek2 MLA (attention.kv_lora_rank) and llama.cpp's expert keys. MLA files as llama.cpp's
// converter writes them since b5137 state key_length_mla / value_length_mla (the per-head
// query/key and value widths) beside key_length = kv_lora_rank + rope and head_count_kv = 1
// (the latent cache as llama.cpp sees it); older files state the per-head widths in
// key_length / value_length. Either way config.head_dim is nope + rope and num_kv_heads is
// num_heads.
Status ReadGgufMlaAndExperts(const GgufFile& file, const std::string& arch, ModelDescription* d) {
  ModelConfig& c = d->config;
  MlaConfig& mla = c.mla;
  KV_ASSIGN_OR_RETURN(mla.kv_lora_rank, GgufInt(file, arch, "attention.kv_lora_rank", 0));
  if (mla.kv_lora_rank > 0) {  // the latent plus the RoPE key per token
    KV_ASSIGN_OR_RETURN(mla.qk_rope_head_dim,
                        GgufInt(file, arch, "rope.dimension_count", 0, /*required=*/true));
    KV_ASSIGN_OR_RETURN(const int64_t key_mla, GgufInt(file, arch, "attention.key_length_mla", 0));
    KV_ASSIGN_OR_RETURN(const int64_t value_mla,
                        GgufInt(file, arch, "attention.value_length_mla", 0));
    if (key_mla > 0 && value_mla > 0) {
      c.head_dim = key_mla;
      mla.v_head_dim = value_mla;
      c.num_kv_heads = c.num_heads;
      mla.split_kv_b = true;
    } else {
      KV_ASSIGN_OR_RETURN(mla.v_head_dim, GgufInt(file, arch, "attention.value_length", 0));
    }
    c.rope.head_dim = c.head_dim;
    mla.qk_nope_head_dim = c.head_dim > mla.qk_rope_head_dim ? c.head_dim - mla.qk_rope_head_dim : 0;
    KV_ASSIGN_OR_RETURN(mla.q_lora_rank, GgufInt(file, arch, "attention.q_lora_rank", 0));
    // Stored as 0.1 * mscale_all_dim (llama.cpp's converter; its loader divides by 0.1).
    KV_ASSIGN_OR_RETURN(const double log_mul,
                        GgufFloat(file, arch, "rope.scaling.yarn_log_multiplier", 0.0));
    mla.yarn_log_multiplier = static_cast<float>(log_mul / 0.1);
  }
  MoeConfig& moe = c.moe;
  int64_t groups = 0, groups_used = 0, gating = 0;
  const std::tuple<int64_t*, const char*, int64_t> fields[] = {
      {&moe.num_experts, "expert_count", 0},
      {&moe.num_experts_used, "expert_used_count", 0},
      {&moe.num_shared_experts, "expert_shared_count", 0},
      {&moe.expert_ffn_dim, "expert_feed_forward_length", 0},
      {&d->shared_expert_ffn_dim, "expert_shared_feed_forward_length", 0},
      {&moe.first_dense_layers, "leading_dense_block_count", 0},
      {&groups, "expert_group_count", 0},
      {&groups_used, "expert_group_used_count", 0},
      {&gating, "expert_gating_func", 0},
      {&d->sliding_window_tokens, "attention.sliding_window", 0}};
  for (const auto& [field, key, def] : fields) {
    KV_ASSIGN_OR_RETURN(*field, GgufInt(file, arch, key, def));
  }
  moe.num_groups = std::max<int64_t>(1, groups);
  moe.num_groups_used = groups > 1 ? groups_used : 1;
  // llama.cpp LLAMA_EXPERT_GATING_FUNC_TYPE: 0 none (softmax for DeepSeek), 1 softmax,
  // 2 sigmoid; the others are not DeepSeek's.
  if (gating < 0 || gating > 2) {
    return UnimplementedError("expert_gating_func " + std::to_string(gating) +
                              " (supported: 1 softmax, 2 sigmoid)");
  }
  moe.gating = gating == 2 ? ExpertGating::kSigmoid : ExpertGating::kSoftmax;
  KV_ASSIGN_OR_RETURN(const double scale, GgufFloat(file, arch, "expert_weights_scale", 0.0));
  moe.weights_scale = scale == 0.0 ? 1.0f : static_cast<float>(scale);  // 0: no scaling
  StatusOr<bool> norm = file.GetBool(arch + ".expert_weights_norm");
  if (norm.ok()) {
    moe.normalize_weights = *norm;
  } else if (norm.status().code() != StatusCode::kNotFound) {
    return norm.status();
  }
  if (moe.num_experts > 0) {
    moe.selection_bias = file.FindTensor("blk." + std::to_string(moe.first_dense_layers) +
                                         ".exp_probs_b.bias") != nullptr;
  }
  return OkStatus();
}

}  // namespace

RopeLayout GgufRopeLayout(const std::string& arch) {
  return arch == "qwen2" ? RopeLayout::kNeox : RopeLayout::kInterleaved;
}

StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
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
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError("'" + path + "' is not valid JSON");
  return j;
}

StatusOr<ModelDescription> DescribeHfConfig(const json& root) {
  if (!root.is_object()) return InvalidArgumentError("config.json is not a JSON object");
  // Multimodal configs keep the decoder's fields in text_config.
  const json& j = !root.contains("num_hidden_layers") && root.contains("text_config") &&
                          root["text_config"].is_object()
                      ? root["text_config"]
                      : root;
  ModelDescription d;
  ModelConfig& c = d.config;
  c.architecture = StringField(j, "model_type");
  if (c.architecture.empty()) c.architecture = StringField(root, "model_type");
  if (root.contains("architectures") && root["architectures"].is_array() &&
      !root["architectures"].empty() && root["architectures"][0].is_string()) {
    d.hf_architecture = root["architectures"][0].get<std::string>();
  }
  d.name_or_path = StringField(root, "_name_or_path");
  d.dtype = HfDtype(root.contains("torch_dtype") || root.contains("dtype") ? root : j);

  KV_ASSIGN_OR_RETURN(c.num_layers, IntInRange(j, "num_hidden_layers", 0, kMaxLayers));
  KV_ASSIGN_OR_RETURN(c.num_heads, IntInRange(j, "num_attention_heads", 0, kMaxHeads));
  if (c.num_layers <= 0) {
    return InvalidArgumentError("num_hidden_layers is missing or not positive");
  }
  if (c.num_heads <= 0) {
    return InvalidArgumentError("num_attention_heads is missing or not positive");
  }
  KV_ASSIGN_OR_RETURN(c.num_kv_heads, IntInRange(j, "num_key_value_heads", c.num_heads, kMaxHeads));
  KV_ASSIGN_OR_RETURN(c.hidden_dim, IntInRange(j, "hidden_size", 0, kMaxWidth));
  KV_ASSIGN_OR_RETURN(c.head_dim, IntInRange(j, "head_dim", c.hidden_dim / c.num_heads,
                                             kMaxHeadDim));
  KV_ASSIGN_OR_RETURN(c.ffn_dim, IntInRange(j, "intermediate_size", 0, kMaxWidth));
  KV_ASSIGN_OR_RETURN(c.vocab_size, IntInRange(j, "vocab_size", 0, kMaxVocab));
  KV_ASSIGN_OR_RETURN(c.max_seq_len, IntInRange(j, "max_position_embeddings", 0,
                                                kMaxDescribedContextTokens));
  const bool bert = c.architecture == "bert" || d.hf_architecture == "BertModel";
  KV_ASSIGN_OR_RETURN(const double eps, bert ? FloatField(j, "layer_norm_eps", 1e-12)
                                             : FloatField(j, "rms_norm_eps", 1e-6));
  if (bert) {  // an encoder: bidirectional, token types; pooling comes from modules.json
    c.causal = false;
    KV_ASSIGN_OR_RETURN(c.token_type_count, IntInRange(j, "type_vocab_size", 2, 1024));
    d.hidden_act = StringField(j, "hidden_act");
    d.position_embedding_type = StringField(j, "position_embedding_type");
  }
  KV_ASSIGN_OR_RETURN(const double theta, FloatField(j, "rope_theta", 10000.0));
  c.norm_eps = static_cast<float>(eps);
  c.rope.theta = static_cast<float>(theta);
  c.rope.layout = RopeLayout::kNeox;  // HF checkpoints rotate halves (rotate_half)
  c.tied_embeddings = BoolField(j, "tie_word_embeddings", false);
  c.qkv_bias = c.architecture == "qwen2" || c.architecture == "qwen2_moe" ||
               d.hf_architecture == "Qwen2ForCausalLM" || BoolField(j, "attention_bias", false);
  if (j.contains("sliding_window") && j["sliding_window"].is_number_integer() &&
      BoolField(j, "use_sliding_window", true)) {
    d.sliding_window_tokens = std::max<int64_t>(0, j["sliding_window"].get<int64_t>());
  }
  KV_RETURN_IF_ERROR(ParseHfMlaAndExperts(j, &d));
  c.rope.head_dim = c.head_dim;
  c.rope.rotary_dim = d.is_mla() ? d.config.mla.qk_rope_head_dim : c.head_dim;
  KV_RETURN_IF_ERROR(ParseHfRopeScaling(j, &d));
  return d;
}

StatusOr<ModelDescription> DescribeHfConfigText(std::string_view json_text) {
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return InvalidArgumentError("config.json is not a JSON object");
  }
  return DescribeHfConfig(root);
}

StatusOr<ModelDescription> ReadHfConfigFile(const std::string& path) {
  KV_ASSIGN_OR_RETURN(const json j, ReadJsonFile(path));
  return DescribeHfConfig(j);
}

StatusOr<ModelDescription> DescribeGgufModel(const GgufFile& file, const std::string& path) {
  KV_ASSIGN_OR_RETURN(const std::string arch, file.GetString("general.architecture"));
  ModelDescription d;
  ModelConfig& c = d.config;
  c.architecture = arch;
  StatusOr<std::string> name = file.GetString("general.name");
  c.name = name.ok() ? *name : path.substr(path.find_last_of('/') + 1);
  KV_ASSIGN_OR_RETURN(c.num_layers, GgufInt(file, arch, "block_count", 0, /*required=*/true));
  KV_ASSIGN_OR_RETURN(c.num_heads,
                      GgufInt(file, arch, "attention.head_count", 0, /*required=*/true));
  if (c.num_heads <= 0) return InvalidArgumentError("attention.head_count must be positive");
  KV_ASSIGN_OR_RETURN(c.num_kv_heads, GgufInt(file, arch, "attention.head_count_kv", c.num_heads));
  KV_ASSIGN_OR_RETURN(c.max_seq_len, GgufInt(file, arch, "context_length", 0));
  KV_ASSIGN_OR_RETURN(c.hidden_dim, GgufInt(file, arch, "embedding_length", 0));
  KV_ASSIGN_OR_RETURN(c.ffn_dim, GgufInt(file, arch, "feed_forward_length", 0));
  KV_ASSIGN_OR_RETURN(c.head_dim,
                      GgufInt(file, arch, "attention.key_length", c.hidden_dim / c.num_heads));
  KV_ASSIGN_OR_RETURN(c.rope.rotary_dim, GgufInt(file, arch, "rope.dimension_count", c.head_dim));
  c.rope.head_dim = c.head_dim;
  KV_ASSIGN_OR_RETURN(const double theta, GgufFloat(file, arch, "rope.freq_base", 10000.0));
  c.rope.theta = static_cast<float>(theta);
  if (arch == "bert") {
    // An encoder: LayerNorm's eps, pooling, causal, token types (llama.cpp's keys and
    // defaults: causal when absent, no pooling when absent).
    KV_ASSIGN_OR_RETURN(const double eps, GgufFloat(file, arch, "attention.layer_norm_epsilon", -1.0));
    if (eps <= 0.0) return InvalidArgumentError("bert.attention.layer_norm_epsilon is missing");
    c.norm_eps = static_cast<float>(eps);
    KV_ASSIGN_OR_RETURN(const int64_t pooling, GgufInt(file, arch, "pooling_type", 0));
    if (pooling < 0 || pooling > 3) {
      return InvalidArgumentError("bert.pooling_type " + std::to_string(pooling) +
                                  " (supported: 0 none, 1 mean, 2 cls, 3 last)");
    }
    c.pooling = static_cast<PoolingType>(pooling);
    StatusOr<bool> causal = file.GetBool(arch + ".attention.causal");
    c.causal = causal.ok() ? *causal : true;
    StatusOr<int64_t> types = file.GetInt("tokenizer.ggml.token_type_count");
    c.token_type_count = types.ok() ? *types : 0;
    if (c.token_type_count <= 0) {
      return InvalidArgumentError("a bert model needs tokenizer.ggml.token_type_count > 0");
    }
  } else {
    KV_ASSIGN_OR_RETURN(const double eps,
                        GgufFloat(file, arch, "attention.layer_norm_rms_epsilon", 1e-5));
    c.norm_eps = static_cast<float>(eps);
  }
  c.rope.layout = GgufRopeLayout(arch);
  c.qkv_bias = arch == "qwen2";
  StatusOr<std::string> scaling = file.GetString(arch + ".rope.scaling.type");
  if (scaling.ok()) d.rope_scaling_type = *scaling;
  if (d.rope_scaling_type == "linear") {
    KV_ASSIGN_OR_RETURN(const double factor, GgufFloat(file, arch, "rope.scaling.factor", 1.0));
    c.rope.scaling = RopeScalingType::kLinear;
    c.rope.scaling_factor = static_cast<float>(factor);
  } else if (d.rope_scaling_type == "yarn") {  // llama.cpp reads no beta for deepseek2: 32 / 1
    KV_ASSIGN_OR_RETURN(const double factor, GgufFloat(file, arch, "rope.scaling.factor", 1.0));
    KV_ASSIGN_OR_RETURN(c.rope.yarn_original_max_positions,
                        GgufInt(file, arch, "rope.scaling.original_context_length", c.max_seq_len));
    c.rope.scaling = RopeScalingType::kYarn;
    c.rope.scaling_factor = static_cast<float>(factor);
  }
  KV_ASSIGN_OR_RETURN(c.vocab_size, GgufInt(file, arch, "vocab_size", 0));
  if (c.vocab_size <= 0) {
    const GgufTensorInfo* embd = file.FindTensor("token_embd.weight");
    if (embd != nullptr && !embd->shape.empty()) c.vocab_size = embd->shape[0];
  }
  c.tied_embeddings = arch != "bert" && file.FindTensor("output.weight") == nullptr;
  KV_RETURN_IF_ERROR(ReadGgufMlaAndExperts(file, arch, &d));
  return d;
}

}  // namespace kvserve

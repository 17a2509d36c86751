// The models the capacity planner plans for: what it needs of a model's geometry and weights,
// from a built-in preset, a Hugging Face config.json (or model folder), a GGUF file's metadata,
// or a llama2.c checkpoint. Files are read by the model library's one reader per format
// (model/model_description.h); this file turns a ModelDescription into a PlanModel and
// estimates parameters from its shapes. Plain functions over a plain value type.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "cost/hardware.h"
#include "cost/step_time.h"
#include "kv/kv_spec.h"
#include "model/model_description.h"
#include "tensor/dtype.h"

namespace kvserve::plan {

// Longest --max-model-len / max_position_embeddings the planner accepts.
inline constexpr int64_t kPlanMaxContextTokens = kMaxDescribedContextTokens;

// What the planner needs to know about a model.
struct PlanModel {
  std::string name;          // "Llama-3.3-70B", general.name, or the file name
  std::string source;        // "preset llama-3.3-70b", the config.json's path, "GGUF PATH", ...
  std::string architecture;  // llama, qwen2, deepseek_v2 (HF model_type or GGUF arch)
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // kSeparateKv
  int64_t head_dim = 0;      // kSeparateKv
  KvLayout kv_layout = KvLayout::kSeparateKv;
  int64_t kv_lora_rank = 0;      // kMlaLatent: latent values per token and layer
  int64_t qk_rope_head_dim = 0;  // kMlaLatent: decoupled RoPE key values per token and layer
  int64_t hidden_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_context_tokens = 0;  // max_position_embeddings / GGUF context_length
  DType dtype = DType::kBF16;      // the model's dtype: what `--kv-cache-dtype auto` means
  std::string auto_dtype_reason = "the model's dtype";  // why, for the report
  int64_t num_parameters = 0;                           // 0 when unknown
  // Bytes of the stored weights: from the files when they are known, else num_parameters at
  // `dtype`. weights_note says which ("bf16", "q8_0/f32 GGUF tensors", "safetensors files").
  int64_t weight_bytes = 0;
  std::string weights_note;
  // The stored bytes by weight type, largest first, when the files say (GGUF tensors, a
  // loaded checkpoint); empty otherwise. Sums to weight_bytes.
  std::vector<std::pair<DType, int64_t>> weight_bytes_by_type;
  bool parameters_estimated = false;  // num_parameters from the config's shapes
  bool weights_estimated = false;     // weight_bytes from num_parameters, not from files
  // What the cost model needs (cost/step_time.h): parameters each token multiplies, attention
  // widths, experts. From the same description and parameter count as the fields above.
  cost::ModelShape shape;
};

// The cost model's view of `description` with `num_parameters` in all (embeddings, output,
// every expert): layer parameters are what remains after the embedding table, the output
// projection (unless tied) and the routed experts.
cost::ModelShape CostShape(const ModelDescription& description, int64_t num_parameters);

// `model` with `kv` on `num_devices` x `hardware` (tensor parallel): bytes per parameter from
// the stored weights, the compute type from their main type. InvalidArgument (from
// cost::ValidateDeployment) when it cannot be timed.
StatusOr<cost::Deployment> MakeDeployment(const PlanModel& model, const KvCacheSpec& kv,
                                          const cost::HardwareProfile& hardware,
                                          int num_devices, int64_t kv_budget_tokens);

// Ok when the KV geometry is in range (num_layers, num_kv_heads and head_dim, or the MLA
// dims), so that bytes per token cannot overflow.
Status ValidatePlanModel(const PlanModel& model);

// The KV cache geometry of `model` with `dtype` and `block_size`.
KvCacheSpec PlanKvCacheSpec(const PlanModel& model, DType dtype, int64_t block_size);

// num_parameters stored at `dtype` (Q8_0: 34 bytes per 32 values), rounded to whole bytes.
int64_t WeightBytesAt(int64_t num_parameters, DType dtype);

// Parameters implied by a description's shapes: embeddings (and the output projection unless
// tied), norms, attention (MHA/GQA with optional q/k/v biases, or DeepSeek MLA), dense or
// mixture-of-experts feed-forward (routed and shared experts, router). DeepSeek V3's
// multi-token-prediction layers are not counted. 0 when the count does not fit in int64.
int64_t EstimateParameters(const ModelDescription& description);

// The planner's view of `description`: its KV geometry (MLA when kv_lora_rank > 0), and
// parameters estimated from the shapes with weights at `dtype`.
PlanModel PlanModelFromDescription(const ModelDescription& description, const std::string& name,
                                   const std::string& source, DType dtype);

// Built-in presets: llama-3.3-70b, llama-3.1-8b, mistral-7b, qwen2.5-7b, deepseek-v2-lite,
// smollm2-135m, qwen2.5-0.5b, llama-3.2-1b (published config.json values).
std::vector<std::string> PlanPresetNames();
// Unknown names give InvalidArgument listing the known ones.
StatusOr<PlanModel> PlanModelFromPreset(const std::string& name);
// A Hugging Face config.json's text (any decoder: llama, mistral, qwen2, deepseek_v2/v3 MLA,
// nested text_config). `source` names it in the output; the name is _name_or_path, else
// `default_name` (the folder's name), else architectures[0]. Parameters are estimated from the
// shapes (dense, Mixtral/Qwen MoE, DeepSeek MLA + MoE).
StatusOr<PlanModel> PlanModelFromHfConfig(const std::string& json_text, const std::string& source,
                                          const std::string& default_name = "");
// A GGUF file (metadata only), a Hugging Face folder or config.json, or a llama2.c checkpoint.
StatusOr<PlanModel> LoadPlanModel(const std::string& path);
// `kvserve plan --preset NAME | --model PATH`: exactly one of the two may be non-empty (else
// InvalidArgument naming both flags); the preset, else the file.
StatusOr<PlanModel> ResolvePlanModel(const std::string& preset, const std::string& model_path);

}  // namespace kvserve::plan

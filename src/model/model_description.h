// ModelDescription: what a model file states about its architecture (a Hugging Face
// config.json, a GGUF file's metadata), read without any tensor data and for any decoder
// architecture, including those the loader cannot run (DeepSeek MLA, mixture-of-experts,
// sliding windows). The one reader of each format: the loaders (LoadHfModel, LoadGgufModel)
// build their ModelConfig from it and refuse what they cannot run; the capacity planner
// (src/plan) sizes KV caches and weights from it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "tensor/dtype.h"

namespace kvserve {

// Plain value type. Integer fields are 0 when the file does not state them (and the format has
// no default); consumers decide what is required.
struct ModelDescription {
  // The dense decoder's fields. architecture: the HF model_type ("llama", "deepseek_v2",
  // "mixtral"; "" when absent) or GGUF general.architecture ("llama", "deepseek2"). name:
  // GGUF general.name or the file name; "" for HF configs (see name_or_path). max_seq_len:
  // max_position_embeddings / context_length. For MLA models head_dim is the query/key head
  // (qk_nope_head_dim + qk_rope_head_dim).
  ModelConfig config;
  std::string hf_architecture;  // HF architectures[0] ("LlamaForCausalLM"); "" otherwise
  std::string name_or_path;     // HF _name_or_path; "" otherwise
  std::optional<DType> dtype;   // HF torch_dtype (f32, f16 or bf16) when stated and known
  // RoPE scaling as stated ("", "none", "linear", "llama3", "yarn", ...). config.rope holds
  // the parameters of linear and llama3 scaling; others are only named here.
  std::string rope_scaling_type;
  int64_t sliding_window_tokens = 0;  // 0: full attention

  // DeepSeek MLA and mixture-of-experts fields are config.mla and config.moe. Layer i of a
  // described MoE model uses experts when config.moe.IsMoeLayer(i) and (moe_layer_freq <= 1 or
  // i % moe_layer_freq == 0). Described but not run: Qwen MoE's one shared expert.
  int64_t shared_expert_ffn_dim = 0;  // Qwen MoE: one shared expert of this width
  int64_t moe_layer_freq = 1;

  // BERT encoders (HF BertModel): config.json's hidden_act ("gelu", ...) and
  // position_embedding_type ("absolute", ...), as stated ("" when absent).
  std::string hidden_act;
  std::string position_embedding_type;

  bool is_mla() const { return config.is_mla(); }
};

// Ranges the readers accept: every real model, and products of them that stay in int64.
inline constexpr int64_t kMaxDescribedContextTokens = int64_t{1} << 32;

// A Hugging Face config.json (object or text). Multimodal configs that nest the decoder in
// text_config are read from there. Errors: not a JSON object, num_hidden_layers or
// num_attention_heads missing or not positive, a field of the wrong type or out of range.
StatusOr<ModelDescription> DescribeHfConfig(const nlohmann::json& config);
StatusOr<ModelDescription> DescribeHfConfigText(std::string_view json_text);
// Reads and describes the config.json at `path` (at most 64 MiB).
StatusOr<ModelDescription> ReadHfConfigFile(const std::string& path);

// A GGUF file's metadata (general.architecture, <arch>.block_count and
// <arch>.attention.head_count are required) and tensor infos (vocabulary rows when
// <arch>.vocab_size is absent, tied output). `path` names the model when general.name is
// absent.
StatusOr<ModelDescription> DescribeGgufModel(const GgufFile& file, const std::string& path);

// The RoPE pair order of GGUF weights of `arch`: llama and mistral rotate interleaved pairs
// (llama.cpp LLAMA_ROPE_TYPE_NORM; convert_hf_to_gguf.py permutes HF Q/K rows into it), qwen2
// rotates NeoX halves.
RopeLayout GgufRopeLayout(const std::string& arch);

// Reads a JSON file of at most 64 MiB (configs, safetensors indexes, tokenizer configs).
StatusOr<nlohmann::json> ReadJsonFile(const std::string& path);

}  // namespace kvserve

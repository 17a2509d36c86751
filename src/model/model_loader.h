// Loading a model from any supported source into one in-memory form. Tensor names follow the
// GGUF `llama` conventions of llama.cpp, whatever the source:
//   token_embd.weight [vocab, hidden]          output_norm.weight [hidden]
//   output.weight [vocab, hidden] (absent when tied)
//   blk.N.attn_norm.weight  blk.N.attn_q.weight [heads*head_dim, hidden]
//   blk.N.attn_k.weight / attn_v.weight [kv_heads*head_dim, hidden]  (+ .bias for Qwen2)
//   blk.N.attn_output.weight [hidden, heads*head_dim]
//   blk.N.ffn_norm.weight  blk.N.ffn_gate.weight / ffn_up.weight [ffn, hidden]
//   blk.N.ffn_down.weight [hidden, ffn]
// Shapes are outermost first (see tensor.h).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "base/status.h"
#include "model/model_config.h"
#include "model/quant_mix.h"
#include "tensor/tensor.h"
#include "tokenizer/vocab_spec.h"

namespace kvserve {

struct LoadedModel {
  ModelConfig config;
  std::map<std::string, Tensor> tensors;
  std::optional<VocabSpec> vocab;  // absent when the source carries no tokenizer
  std::string format;              // "gguf", "llama2c", "llama2c-q80", "hf", "builtin"
  std::string path;
  std::string chat_template;       // tokenizer.chat_template, when present

  // Returns the named tensor or NotFound naming it.
  StatusOr<Tensor> Get(const std::string& name) const;
  // Weight dtype of the bulk of the parameters ("q8_0", "f16", ...), and total weight bytes.
  std::string WeightTypeSummary() const;
  int64_t WeightBytes() const;
};

struct LoadOptions {
  std::string tokenizer_path;  // overrides the tokenizer found with or inside the model
  // Called with (bytes done, bytes total) while tensors are read or converted.
  std::function<void(int64_t, int64_t)> progress;
};

// Detects the format from the path: a directory with config.json (Hugging Face), a file with
// GGUF magic, a llama2.c Q8_0 export (magic "ak42"), or else a llama2.c float32 checkpoint.
StatusOr<LoadedModel> LoadModel(const std::string& path, const LoadOptions& options = {});

// Per-format loaders (each validates shapes and sizes against the file before use).
StatusOr<LoadedModel> LoadGgufModel(const std::string& path, const LoadOptions& options);
StatusOr<LoadedModel> LoadLlama2cModel(const std::string& path, const LoadOptions& options);
StatusOr<LoadedModel> LoadHfModel(const std::string& dir, const LoadOptions& options);

struct SaveGgufOptions {
  // Writes every tensor in the type QuantMixDType gives it for this file type (dequantising
  // and requantising rows where the stored type differs; tensors already in their type are
  // written as they are) and sets general.file_type to it. Unset: tensors are written as
  // they are, general.file_type from the type of the bulk of the matrices.
  std::optional<QuantFileType> file_type;
  int num_threads = 0;  // for requantising rows; 0: all hardware threads
  // Called with (bytes done, bytes total) of the tensors being requantised.
  std::function<void(int64_t, int64_t)> progress;
};

// Writes `model` (config, tokenizer and tensors) as a GGUF v3 file that llama.cpp-ecosystem
// readers accept (general.architecture, <arch>.* hyper-parameters, tokenizer.ggml.*).
Status SaveGgufModel(const LoadedModel& model, const std::string& path,
                     const SaveGgufOptions& options = {});

}  // namespace kvserve

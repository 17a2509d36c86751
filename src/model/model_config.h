// ModelConfig: the hyper-parameters of a Llama-family decoder, whatever file they came from.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "kernels/kernels.h"

namespace kvserve {

struct ModelConfig {
  std::string architecture = "llama";  // GGUF general.architecture: llama, qwen2, mistral
  std::string name;                    // general.name or the file name
  int64_t vocab_size = 0;
  int64_t hidden_dim = 0;        // embedding width (llama2.c `dim`)
  int64_t ffn_dim = 0;           // SwiGLU inner width (llama2.c `hidden_dim`)
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;          // usually hidden_dim / num_heads
  int64_t max_seq_len = 0;       // context length the model was trained for
  float norm_eps = 1e-5f;
  RopeOptions rope;              // head_dim, theta, layout, scaling
  bool tied_embeddings = false;  // output projection shares token_embd
  bool qkv_bias = false;         // Qwen2

  // Checks positivity, divisibility (heads by kv heads), and sizes that would overflow.
  Status Validate() const;
  // Parameter count implied by the shapes (embeddings counted once when tied).
  int64_t NumParameters() const;
};

}  // namespace kvserve

// The tensors a ModelConfig implies (GGUF llama names, llama.cpp order) and their validation,
// shared by the GGUF and Hugging Face loaders and the GGUF writer.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model_config.h"
#include "model/model_loader.h"
#include "tensor/tensor.h"

namespace kvserve {

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;  // outermost first
  bool vector = false;         // norm or bias: stored as f32 in LoadedModel
  bool keep_f32 = false;       // a table llama.cpp wants in f32 (BERT's token_types, positions)
};

// token_embd, output_norm, output (unless tied), then blk.N.{attn_norm, attn_q, attn_k,
// attn_v, [attn_q/k/v.bias], attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}. MLA layers
// have attn_q (or attn_q_a_norm, attn_q_a, attn_q_b), attn_kv_a_norm, attn_kv_a_mqa and
// attn_k_b + attn_v_b (or attn_kv_b) instead of attn_q/k/v; MoE layers ffn_gate_inp,
// [exp_probs_b], ffn_{gate,down,up}_exps and ffn_{gate,down,up}_shexp instead of the dense FFN.
std::vector<ExpectedTensor> ExpectedModelTensors(const ModelConfig& config);

// `name` from `model`, with its shape checked: `matrix` tensors may be any Matmul weight type
// (the GGML block types need rows of whole blocks), vectors must be f32/f16/bf16. NotFound or
// InvalidArgument naming the tensor.
StatusOr<const Tensor*> FindModelTensor(const LoadedModel& model, const std::string& name,
                                        const std::vector<int64_t>& shape, bool matrix);
// A vector of `size` values, as float.
StatusOr<std::vector<float>> FindModelVector(const LoadedModel& model, const std::string& name,
                                             int64_t size);

// Fills `out` with every tensor `config` needs, obtained from `lookup`, after checking its
// shape and dtype (f32, f16, bf16, or a GGML block type: q8_0, q4_0 ... q6_k, matrices only);
// norms and biases are converted to f32 (a small copy).
Status CollectModelTensors(const ModelConfig& config,
                           const std::function<StatusOr<Tensor>(const std::string&)>& lookup,
                           std::map<std::string, Tensor>* out);

// The named tensor of `model` with exactly `shape` (block-type rows must be whole blocks); NotFound
// or InvalidArgument naming it otherwise. The pointer stays valid while the model lives.
StatusOr<const Tensor*> FindShapedTensor(const LoadedModel& model, const std::string& name,
                                         const std::vector<int64_t>& shape);

// A 1-D f16/bf16 tensor copied to f32 (f32 returned as is); other dtypes are refused.
StatusOr<Tensor> VectorToF32(const Tensor& t, const std::string& name);

}  // namespace kvserve

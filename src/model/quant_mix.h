// File types of quantised GGUF models ("q4_k_m", "q8_0", ...) and the per-tensor weight type
// each one gives a tensor, following the rules of llama.cpp's quantiser (llama-quant.cpp:
// llama_tensor_get_type, use_more_bits, tensor_type_fallback) for the llama, qwen2 and
// deepseek2 architectures, so that `kvserve mkmodel/convert --dtype q4_k_m` writes the same
// mix of types as `llama-quantize ... Q4_K_M` would. Plain functions over plain values;
// thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/model_config.h"
#include "tensor/dtype.h"

namespace kvserve {

// A model file's type: one weight type for every matrix (f32 ... q6_k), or a llama.cpp mix
// (q3_k_s ... q5_k_m) giving some tensors more bits.
enum class QuantFileType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ2_K,
  kQ3_K_S,
  kQ3_K_M,
  kQ3_K_L,
  kQ4_K_S,
  kQ4_K_M,
  kQ5_K_S,
  kQ5_K_M,
  kQ6_K,
};

// "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k_s", "q3_k_m",
// "q3_k_l", "q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m", "q6_k".
const char* QuantFileTypeName(QuantFileType type);
// Every name above, in that order.
std::vector<std::string> QuantFileTypeNames();
// One of the names (any case); "q3_k", "q4_k" and "q5_k" mean the _m mixes (as in
// llama-quantize). nullopt otherwise.
std::optional<QuantFileType> ParseQuantFileType(std::string_view name);
// ParseQuantFileType for a command-line flag: InvalidArgument naming `flag` and listing the
// names when `name` is not one of them.
StatusOr<QuantFileType> ParseQuantFileTypeFlag(const std::string& name,
                                               std::string_view flag = "--dtype");
// The file type whose every matrix has `dtype` (f32, f16, bf16, q8_0, q4_0 ... q6_k; the
// k-quants give the _m mixes' base type but no mix: use QuantFileType values for those);
// nullopt for other dtypes.
std::optional<QuantFileType> UniformQuantFileType(DType dtype);

// llama.cpp's LLAMA_FTYPE value for general.file_type (ALL_F32 = 0, MOSTLY_F16 = 1, Q4_0 = 2,
// Q4_1 = 3, Q8_0 = 7, Q5_0 = 8, Q5_1 = 9, Q2_K = 10, Q3_K_S/M/L = 11/12/13, Q4_K_S/M = 14/15,
// Q5_K_S/M = 16/17, Q6_K = 18, BF16 = 32).
uint32_t LlamaFtype(QuantFileType type);
// The type of the bulk of the matrices (q4_k for q4_k_m, ...).
DType QuantFileTypeBaseDType(QuantFileType type);

// What the rules need to know about the model a tensor belongs to.
struct QuantMixModel {
  std::string architecture;  // "llama", "qwen2", "deepseek2" (GGUF names)
  int64_t num_layers = 0;
  int64_t gqa = 1;          // query heads per KV head (llama.cpp's n_gqa())
  int64_t num_experts = 0;  // routed experts (0 for dense models)
  bool has_output_weight = true;  // false when output.weight is tied to token_embd.weight
  bool is_70b = false;            // llama.cpp's LLM_TYPE_70B (80 GQA llama layers)
};
// The QuantMixModel of `config` as it is saved to GGUF.
QuantMixModel QuantMixModelFor(const ModelConfig& config);

// The type a tensor (GGUF name, shape outermost first) is written in for `type`:
//   - tensors llama.cpp does not quantise (1-D tensors, norms, the MoE router
//     ffn_gate_inp.weight) are f32;
//   - for f32, f16, bf16: that type; otherwise the file type's base type, with llama.cpp's
//     mix rules on top: output.weight (token_embd.weight when there is no output.weight) gets
//     q6_k (q8_0 in a q8_0 file, or when its rows are not whole blocks of the base type);
//     attn_v (attn_kv_b) and ffn_down more bits in the layers use_more_bits picks for _m,
//     attn_output more in q2_k / q3_k_m / q3_k_l, ...;
//   - then the fallback for rows that are not whole blocks: q4_k -> q5_0, q5_k -> q5_1,
//     q6_k -> q8_0, q2_k / q3_k -> q4_0, and f16 when even that does not fit.
DType QuantMixDType(QuantFileType type, const QuantMixModel& model, std::string_view name,
                    const std::vector<int64_t>& shape);

// llama.cpp's use_more_bits(i_layer, n_layers): the first and last eighth of the layers and
// every third layer in between.
bool QuantMixUseMoreBits(int64_t layer, int64_t num_layers);

}  // namespace kvserve

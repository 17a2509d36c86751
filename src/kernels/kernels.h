// Backend-neutral CPU kernel signatures. Each has a scalar oracle with the same signature in
// kernels/reference/reference.h (namespace kvserve::reference) and a SIMD (AVX2/FMA/F16C,
// chosen at run time) + threaded version here (namespace kvserve::kernels), tested against it.
// All activations are float32. `pool` may be null (single-threaded).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace kvserve {

enum class RopeLayout {
  kInterleaved,  // pairs (x[2i], x[2i+1]): llama2.c, GGUF `llama`
  kNeox,         // pairs (x[i], x[i + rotary_dim/2]): HF Llama, Qwen2, GGUF `qwen2`
};

// kYarn: YaRN's frequencies (Peng et al. 2023, as HF DeepseekV2YarnRotaryEmbedding and ggml
// rope_yarn compute them): pairs rotating faster than beta_fast turns over the original context
// keep their frequency, pairs slower than beta_slow are divided by scaling_factor, a linear
// ramp between. Its attention factor is the model's business (DeepSeek folds it into the
// softmax scale, MlaConfig::yarn_log_multiplier).
enum class RopeScalingType { kNone, kLinear, kLlama3, kYarn };

struct RopeOptions {
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;  // 0 means head_dim
  float theta = 10000.0f;
  RopeLayout layout = RopeLayout::kInterleaved;
  RopeScalingType scaling = RopeScalingType::kNone;
  float scaling_factor = 1.0f;            // linear: positions divided by it; llama3: "factor"
  float llama3_low_freq_factor = 1.0f;
  float llama3_high_freq_factor = 4.0f;
  int64_t llama3_original_max_positions = 8192;
  int64_t yarn_original_max_positions = 4096;
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;
};

// Inverse frequencies per rotary pair (rotary_dim / 2 values) with scaling applied.
std::vector<float> RopeInvFreqs(const RopeOptions& options);

namespace kernels {

// True when the AVX2/FMA/F16C paths are in use on this CPU (KVSERVE_NO_SIMD=1 forces false).
bool SimdEnabled();

// The instruction-set level the kernels run at, chosen once at start-up: "scalar", "avx2" or
// "avx512" (AVX-512 F/BW/VL with VNNI). The best this CPU has, unless the environment asks for
// less: KVSERVE_SIMD=scalar|avx2|avx512 (never above what the CPU has), KVSERVE_NO_SIMD=1
// (scalar). SimdLevelNote() says when KVSERVE_SIMD was not followed as given (an unknown
// value, a level the CPU lacks); empty otherwise.
const char* SimdLevelName();
const char* CpuSimdLevelName();  // the best level this CPU supports
const std::string& SimdLevelNote();
// Whether f16 weights are packed at load as bf16 and run on vdpbf16ps (KVSERVE_F16_AS_BF16=1,
// opt-in, at the avx512 level on a CPU with AVX512_BF16): faster prefill, 8 bits of mantissa
// instead of 11 (ik_llama.cpp's `-rtr` makes the same trade on Zen 4). False otherwise.
bool F16WeightsAsBf16();

// y[m, n] = x[m, k] * W^T where W is a 2-D tensor of shape [n, k] in f32, f16, bf16, q8_0 or
// one of the GGML 2- to 6-bit types (q4_0, q4_1, q5_0, q5_1: k a multiple of 32, as for q8_0;
// q2_k ... q6_k: k a multiple of 256). x and y are row-major float32. Threads split the work.
// The block types quantize the activations to int8 once per call (blocks of 32 for q8_0 and the
// 32-value types, one scale per 256 values for the k-quants) and use exact integer dot products.
void Matmul(const float* x, int64_t m, const Tensor& w, float* y, ThreadPool* pool);

// One product of a MatmulGroup: y[m, w.shape[0]] = x W^T.
struct MatmulOut {
  const Tensor* w;
  float* y;
};
constexpr int kMaxMatmulGroup = 4;
// Several products of the same activations (Q, K and V; gate and up), each exactly what Matmul
// gives: where the weights share a dtype and k (q8_0, or f32/f16/bf16 packed at load), the
// activations are quantized (or rounded) once and all products run in one parallel section,
// instead of one section per weight: at one decode row a section's fork and join are a large
// part of a small model's matmul. Otherwise one Matmul per weight. At most kMaxMatmulGroup.
void MatmulGroup(const float* x, int64_t m, std::initializer_list<MatmulOut> outs,
                 ThreadPool* pool);

// The layout the current SIMD level's Matmul would otherwise build from `w` on every call,
// built once (store it in w.packed; Matmul then reads it instead of w.data). Today, at AVX2 and
// AVX-512 VNNI: q8_0 panels (16 rows of offset bytes and f32 scales with VNNI, 8 rows of the
// bytes and f32 scales at AVX2; 1.06x the bytes of w, read at every row count; results
// bit-identical to packing per call), q4_0 and q5_0 4- and 5-bit panels (the file's bytes
// rearranged, every row count), q4_k and q6_k panels (16 / 8 rows of the file's bits
// in 4-byte chunks plus scale bytes, 1.02-1.1x its bytes, every row count), and f32/f16/bf16
// panels
// (32 rows with VNNI, 16 at AVX2, column by column in w's own dtype, bf16 in column pairs; the
// bytes of w up to the last panel's padding; read at every row count; without them Matmul runs
// the unpacked float kernels, whose sums differ in the last bits; f16 as bf16 panels under
// F16WeightsAsBf16()). Null where the level has no
// packed layout for w's type, or when the allocation fails. The layout belongs to the level in
// force when it was made (the level is chosen at start-up; tests that switch it pack again).
std::shared_ptr<const void> PackMatmulWeights(const Tensor& w);
int64_t PackedMatmulWeightsBytes(const Tensor& w);  // what PackMatmulWeights(w) allocates
// Whether Matmul at the current level reads only w.packed, never w.data, when w.packed holds
// PackMatmulWeights(w): true for every packed layout (f32/f16/bf16, q8_0, q4_0, q5_0, q4_k and
// q6_k where the level packs them).
bool PackedReplacesWeights(const Tensor& w);

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i], for `num_rows` rows of `n` values.
void RmsNorm(const float* x, const float* weight, int64_t num_rows, int64_t n, float eps,
             float* out);

// out = (x - mean) / sqrt(var + eps) * weight + bias per row of `n` values (`num_rows` rows),
// var = mean((x - mean)^2) computed in two passes (BERT's LayerNorm, as ggml_norm); out may
// alias x.
void LayerNorm(const float* x, const float* weight, const float* bias, int64_t num_rows,
               int64_t n, float eps, float* out);

// out[i] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): GELU's tanh form (HF "gelu_new",
// ggml_gelu; BERT's erf form differs by at most 4.7e-4). out may alias x.
void Gelu(const float* x, int64_t n, float* out);

// Rotates `num_heads` heads of `head_dim` values at x[h * head_dim] in place for `position`,
// using inv_freqs from RopeInvFreqs (its size is rotary_dim / 2; dimensions past rotary_dim
// are left unchanged).
void Rope(float* x, int64_t num_heads, int64_t head_dim, int64_t position,
          const std::vector<float>& inv_freqs, RopeLayout layout);
// The angles of a position, as Rope uses them: cos_sin[i] = cos(position * inv_freqs[i]) and
// cos_sin[num_pairs + i] = sin(...), for i < num_pairs = inv_freqs.size(). A forward pass
// computes them once per row for all layers and for both q and k (sin/cos took 2.5% of a
// prefill's CPU time when each Rope call recomputed them).
void RopeCosSin(int64_t position, const std::vector<float>& inv_freqs, float* cos_sin);
// Rope with `cos_sin` = RopeCosSin(position, inv_freqs): the same result, bit for bit.
void Rope(float* x, int64_t num_heads, int64_t head_dim, int64_t position,
          const std::vector<float>& inv_freqs, const float* cos_sin, RopeLayout layout);

// out[i] = silu(gate[i]) * up[i]; out may alias gate.
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);

// In-place numerically stable softmax over n values.
void Softmax(float* x, int64_t n);

// sum_i a[i] * b[i], float accumulation (SIMD lanes sum in another order than the scalar
// loop: results differ by rounding). Used by the response cache's vector index.
float Dot(const float* a, const float* b, int64_t n);

// out[0..dim) = row `token` of `table` ([vocab, dim], any weight dtype), as float.
void EmbeddingLookup(const Tensor& table, int64_t token, float* out);

// Dense causal attention for one sequence (the reference the paged kernels are checked
// against later).
//   q:   [num_queries, num_heads, head_dim]   queries for positions first_pos .. first_pos+num_queries-1
//   k,v: [num_keys, num_kv_heads, head_dim]   keys/values for positions 0 .. num_keys-1
//   out: [num_queries, num_heads, head_dim]
// Query i attends to keys 0 .. first_pos + i. Heads are grouped: head h uses kv head
// h / (num_heads / num_kv_heads). scale is usually 1/sqrt(head_dim).
struct AttentionShape {
  int64_t num_queries = 0;
  int64_t num_keys = 0;
  int64_t first_pos = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 0.0f;
};
void DenseAttention(const float* q, const float* k, const float* v, const AttentionShape& shape,
                    float* out, ThreadPool* pool);

}  // namespace kernels
}  // namespace kvserve

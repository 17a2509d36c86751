// KvCacheSpec: the geometry and element type of a KV cache, and what it costs in bytes. The
// block pool, the storage and the capacity planner (`kvserve plan`) all size memory with it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "tensor/dtype.h"

namespace kvserve {

enum class KvLayout {
  // MHA / GQA: per layer and token, a K and a V vector per KV head.
  kSeparateKv,
  // DeepSeek MLA: per layer and token, one compressed latent (kv_lora_rank values) plus one
  // decoupled RoPE key (qk_rope_head_dim values), shared by all heads; no separate V.
  kMlaLatent,
};

// "separate_kv" or "mla_latent" (plan's JSON, /metrics).
const char* KvLayoutName(KvLayout layout);

// Plain value type. Bytes per token count everything the cache stores per token (values and,
// for int8, the per-token scales); fp8's per-layer, per-KV-head scales are a fixed cost
// (fixed_scale_bytes()), not per token.
struct KvCacheSpec {
  KvLayout layout = KvLayout::kSeparateKv;
  int64_t num_layers = 0;
  // kSeparateKv: KV heads and their width. kMlaLatent: the rows as the kernels see them, one
  // KV head of latent_dim + rope_dim values (MlaLatent() fills both).
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t latent_dim = 0;    // kMlaLatent: kv_lora_rank
  int64_t rope_dim = 0;      // kMlaLatent: qk_rope_head_dim
  DType dtype = DType::kF32;  // f32, f16, bf16, fp8_e4m3, fp8_e5m2 or int8 (kI8)
  int64_t block_size = 16;    // tokens per block

  // An MLA latent cache of `num_layers` layers.
  static KvCacheSpec MlaLatent(int64_t num_layers, int64_t latent_dim, int64_t rope_dim,
                               DType dtype, int64_t block_size);

  // Ok if every field is in range and dtype is a KV dtype.
  Status Validate() const;

  // Bytes of one stored value (4, 2 or 1).
  int64_t value_bytes() const { return DTypeBlockBytes(dtype); }
  // Values stored per token and layer: 2 * num_kv_heads * head_dim, or latent_dim + rope_dim.
  int64_t values_per_token_per_layer() const;
  // Scale groups per token and layer (int8 only): 2 * num_kv_heads (one per K and V head), or
  // 1 for an MLA latent; 0 for other dtypes.
  int64_t scales_per_token_per_layer() const;
  // Bytes per token over all layers, values plus per-token scales.
  int64_t bytes_per_token() const;
  // bytes_per_token() * block_size.
  int64_t bytes_per_block() const;
  // Fixed bytes independent of tokens: fp8's per-layer, per-KV-head K and V scales.
  int64_t fixed_scale_bytes() const;
  // Blocks needed to hold num_tokens tokens (ceil).
  int64_t blocks_for_tokens(int64_t num_tokens) const;
  // "28 layers x 8 KV heads x 64, fp8_e4m3, 16-token blocks".
  std::string ToString() const;
};

// Bytes of one int8 per-token scale (stored as float32).
inline constexpr int64_t kKvScaleBytes = 4;

// True for the dtypes a KV cache may use.
bool IsKvCacheDtype(DType dtype);

// Parses --kv-cache-dtype: auto | f32 | f16 | bf16 | fp8 | fp8_e4m3 | fp8_e5m2 | int8. `auto`
// becomes `auto_dtype` (the model's compute dtype); `fp8` means fp8_e4m3.
StatusOr<DType> ParseKvCacheDtype(std::string_view name, DType auto_dtype);

// Parses a byte count such as "4GiB", "512MiB", "1.5GB", "1e9" or "1048576". Binary suffixes
// (KiB, MiB, GiB, TiB, also K/M/G/T) are powers of 1024; decimal ones (KB, MB, GB, TB) of
// 1000.
StatusOr<int64_t> ParseByteSize(std::string_view text);
// "20.97 GB (19.53 GiB)"-style rendering: decimal GB with two decimals and GiB beside it.
std::string FormatBytesDecimalAndBinary(double bytes);

}  // namespace kvserve

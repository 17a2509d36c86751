// KvStorage: the physical KV pages of every layer in the cache's dtype, their scales, and the
// quantizing write path.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "kv/kv_spec.h"

namespace kvserve {

// Where fp8 scales came from (printed at start-up, exported in stats and metrics).
enum class KvScaleSource {
  kNone,        // the dtype needs no fixed scales (f32, f16, bf16, int8)
  kCalibrated,  // measured at start-up by a calibration pass
  kModelFile,   // read from the model file
  kManual,      // given by the caller (tests, tools)
};
const char* KvScaleSourceName(KvScaleSource source);

// Per-layer, per-KV-head fp8 scales for K and V ([num_layers * num_kv_heads] each, layer
// major); the real value is stored * scale.
struct KvScales {
  std::vector<float> k;
  std::vector<float> v;
  KvScaleSource source = KvScaleSource::kNone;
  std::string detail;  // e.g. "512 tokens of built-in text" or a file name
};

// Quantization counters, per layer.
struct KvQuantStats {
  std::vector<int64_t> clipped_k;  // fp8 values that saturated at +-max, per layer
  std::vector<int64_t> clipped_v;
  int64_t total_clipped() const;
};

// Owns the pages of all layers: for K and for V, [num_blocks, block_size, num_kv_heads,
// head_dim] values of spec.dtype per layer (MLA latent caches: the K plane only, one "KV head"
// of latent_dim + rope_dim values per slot, the latent first; the values the kernels read are
// the first latent_dim channels of those rows, so v_pages() is k_pages() and V's scales are
// K's); for int8 also [num_blocks, block_size,
// num_kv_heads] float scales per layer; for fp8 the fixed per-head scales. Pages are
// allocated once, uninitialised (the OS commits them on first write).
// Engine thread only; Write() of one layer must not race with a reader of that layer.
class KvStorage {
 public:
  // Fails (ResourceExhausted) when the memory cannot be allocated, or on an invalid spec.
  // fp8 storage starts without scales: SetScales() must be called before Write().
  static StatusOr<std::unique_ptr<KvStorage>> Create(const KvCacheSpec& spec,
                                                     int64_t num_blocks);
  KvStorage(const KvStorage&) = delete;
  KvStorage& operator=(const KvStorage&) = delete;

  const KvCacheSpec& spec() const { return spec_; }
  // False for MLA latent caches (no V plane; see the class comment).
  bool has_v() const { return spec_.layout == KvLayout::kSeparateKv; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t num_slots() const { return num_blocks_ * spec_.block_size; }
  // Bytes of pages and scales over all layers.
  int64_t total_bytes() const { return total_bytes_; }
  // Writes zeros over every page and scale so that the OS commits the memory now (pages are
  // allocated uncommitted). A server calls it at start-up: its resident size is then stable
  // from the first request on, and a budget the machine cannot back fails at start-up.
  void CommitMemory();
  // The same for blocks [0, num_blocks) only (clamped to the pool). The block pool hands out
  // the lowest free ids first, so a one-shot run that can use at most N blocks touches exactly
  // these; committing them before timing keeps page faults out of the measurement.
  void CommitMemory(int64_t num_blocks);

  // fp8: installs per-layer, per-head scales (each > 0 and finite). Other dtypes: error.
  Status SetScales(KvScales scales);
  const KvScales& scales() const { return scales_; }
  bool has_scales() const { return !scales_.k.empty(); }

  // Writes num_tokens rows of K and V ([num_tokens, num_kv_heads * head_dim] float32, keys
  // already rotated) into the given slots of `layer`, converting to the storage dtype: fp8
  // divides by the head's scale and saturates (counted in quant_stats()), int8 computes a
  // scale per token and head (absmax / 127). With observe_absmax() on, also records the
  // largest |K| and |V| seen per layer and head (for calibration). MLA latent caches: k holds
  // [num_tokens, latent_dim + rope_dim] latent rows and v is ignored (may be null).
  void Write(int64_t layer, const int64_t* slots, int64_t num_tokens, const float* k,
             const float* v);
  // Token eviction's compaction. The stored K and V of KV head h at slots slots[h][i] (bytes
  // and int8 slot scales, unchanged: exact in every dtype), copied out of / into a buffer.
  // Lists are per KV head (num_kv_heads of them). A compaction gathers every layer before its
  // sequence's old blocks are released and scatters into the new ones, so sources and
  // destinations may be the same blocks.
  struct SlotRows {
    std::vector<uint8_t> bytes;   // K then V row of each (head, slot), in list order
    std::vector<float> scales;    // int8: their K and V slot scales
  };
  void GatherHeadSlots(int64_t layer, const std::vector<std::vector<int64_t>>& slots,
                       SlotRows* rows) const;
  // `slots` must have the shape the rows were gathered with.
  void ScatterHeadSlots(int64_t layer, const std::vector<std::vector<int64_t>>& slots,
                        const SlotRows& rows);
  // Gather from `from`, then scatter to `to` (in place, overlapping or not).
  void MoveHeadSlots(int64_t layer, const std::vector<std::vector<int64_t>>& from,
                     const std::vector<std::vector<int64_t>>& to);
  // KV tiers (disk, Redis): one block's bytes over all layers exactly as stored (any dtype,
  // int8 slot scales included; fp8 head scales and channel norms are not per block: the
  // tiers' model fingerprint covers them), copied out to and back in from a flat buffer of
  // block_bytes(): per layer, K page rows, V page rows, K slot scales, V slot scales.
  int64_t block_bytes() const;
  void CopyBlockOut(int64_t block, uint8_t* out) const;
  void CopyBlockIn(int64_t block, const uint8_t* in);
  // Dequantized K and V of one slot ([num_kv_heads * head_dim] each), for tests and tools.
  // MLA: k gets the latent row; v (may be null) a copy of it.
  void ReadSlot(int64_t layer, int64_t slot, float* k, float* v) const;

  // Raw pages and scales for the attention kernels.
  const void* k_pages(int64_t layer) const { return layers_[layer].k.get(); }
  const void* v_pages(int64_t layer) const {
    return has_v() ? layers_[layer].v.get() : layers_[layer].k.get();
  }
  const float* k_token_scales(int64_t layer) const { return layers_[layer].k_scales.get(); }
  const float* v_token_scales(int64_t layer) const {
    return has_v() ? layers_[layer].v_scales.get() : layers_[layer].k_scales.get();
  }
  // fp8: [num_kv_heads] scales of a layer; null before SetScales or for other dtypes.
  const float* k_head_scales(int64_t layer) const;
  const float* v_head_scales(int64_t layer) const;

  const KvQuantStats& quant_stats() const { return quant_stats_; }

  // Channel normalization (int8 and fp8): per-layer, per-KV-head, per-channel affine maps
  // applied to every key and value before it is quantized: k' = (k - k_mean) / k_scale,
  // v' = (v - v_mean) / v_scale ([num_layers * num_kv_heads * head_dim] each; scales > 0).
  // Attention stays exact: q . k = (q * k_scale) . k' + q . k_mean, and the last term is the
  // same for every key of a query, which softmax ignores, so the model multiplies queries by
  // key_channel_scale(); and sum_t p_t v_t = v_scale * sum_t p_t v'_t + v_mean (the p_t sum
  // to 1), so the model maps the attention output back with value_channel_scale() and
  // value_channel_mean(). Removing channel means and equalizing channel ranges shrinks the
  // quantization error where one channel's magnitude would set every channel's step.
  // ReadSlot and the kernels see the normalized values.
  struct ChannelNorm {
    std::vector<float> k_mean, k_scale, v_mean, v_scale;
  };
  Status SetChannelNorm(ChannelNorm norm);
  bool has_channel_norm() const { return !norm_.k_mean.empty(); }
  // [num_kv_heads * head_dim] of a layer, or null when off.
  const float* key_channel_scale(int64_t layer) const;
  const float* key_channel_mean(int64_t layer) const;
  const float* value_channel_scale(int64_t layer) const;
  const float* value_channel_mean(int64_t layer) const;

  // Calibration support: while on, Write() tracks per-layer, per-head absmax of K and V and
  // per-channel sums, minima and maxima of both.
  void observe_absmax(bool on);
  // [num_layers * num_kv_heads], layer major.
  const std::vector<float>& absmax_k() const { return absmax_k_; }
  const std::vector<float>& absmax_v() const { return absmax_v_; }
  // Per-channel mean of the observed keys (keys = true) or values
  // ([num_layers * num_kv_heads * head_dim]).
  std::vector<float> observed_mean(bool keys) const;
  // Per-channel absmax of the observed keys or values after subtracting `mean`
  // ([layers * heads * head_dim]; 0 for channels never observed).
  std::vector<float> observed_centered_absmax(bool keys, const std::vector<float>& mean) const;

 private:
  struct AlignedFree {
    void operator()(void* p) const;
  };
  struct Layer {
    std::unique_ptr<uint8_t, AlignedFree> k, v;          // pages
    std::unique_ptr<float, AlignedFree> k_scales, v_scales;  // int8 per-slot scales
  };
  KvStorage(const KvCacheSpec& spec, int64_t num_blocks) : spec_(spec), num_blocks_(num_blocks) {}

  KvCacheSpec spec_;
  int64_t num_blocks_;
  int64_t total_bytes_ = 0;
  std::vector<Layer> layers_;
  KvScales scales_;
  std::vector<float> inv_k_scales_, inv_v_scales_;  // 1 / scales_
  KvQuantStats quant_stats_;
  ChannelNorm norm_;                     // empty vectors when off
  std::vector<float> inv_k_scale_, inv_v_scale_;
  std::vector<float> normalized_;        // scratch: one head's normalized values
  bool observing_ = false;
  std::vector<float> absmax_k_, absmax_v_;
  // Per-channel statistics [layers * heads * head_dim]; index 0 keys, 1 values.
  std::vector<double> sum_[2];
  std::vector<float> min_[2], max_[2];
  std::vector<int64_t> observed_tokens_;  // [layers]
};

// Fp8 scales from observed absmax: scale = absmax * headroom / fp8 max, so that values up to
// `headroom` times the calibration maximum still fit before saturating. Heads whose absmax is
// 0 get the smallest scale that keeps 1.0 representable.
KvScales Fp8ScalesFromAbsmax(DType dtype, const std::vector<float>& absmax_k,
                             const std::vector<float>& absmax_v, float headroom);

}  // namespace kvserve

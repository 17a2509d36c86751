#include "kv/kv_storage.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <new>

#include "base/check.h"
#include "base/system_memory.h"

namespace kvserve {

const char* KvScaleSourceName(KvScaleSource source) {
  switch (source) {
    case KvScaleSource::kNone: return "none";
    case KvScaleSource::kCalibrated: return "calibrated";
    case KvScaleSource::kModelFile: return "model file";
    case KvScaleSource::kManual: return "manual";
  }
  return "?";
}

int64_t KvQuantStats::total_clipped() const {
  int64_t total = 0;
  for (int64_t c : clipped_k) total += c;
  for (int64_t c : clipped_v) total += c;
  return total;
}

void KvStorage::AlignedFree::operator()(void* p) const { std::free(p); }

void KvStorage::CommitMemory() { CommitMemory(num_blocks_); }

void KvStorage::CommitMemory(int64_t num_blocks) {
  const int64_t slots = std::clamp<int64_t>(num_blocks, 0, num_blocks_) * spec_.block_size;
  const size_t page_bytes =
      static_cast<size_t>(slots * spec_.num_kv_heads * spec_.head_dim * spec_.value_bytes());
  const size_t scale_bytes =
      spec_.dtype == DType::kI8 ? static_cast<size_t>(slots * spec_.num_kv_heads * 4) : 0;
  for (Layer& layer : layers_) {
    std::memset(layer.k.get(), 0, page_bytes);
    if (has_v()) std::memset(layer.v.get(), 0, page_bytes);
    if (scale_bytes > 0) {
      std::memset(layer.k_scales.get(), 0, scale_bytes);
      if (has_v()) std::memset(layer.v_scales.get(), 0, scale_bytes);
    }
  }
}

namespace {

bool IsFp8(DType d) { return d == DType::kFp8E4M3 || d == DType::kFp8E5M2; }

}  // namespace

namespace {
// Bytes of one block's rows in one plane of one layer, and of its int8 slot scales.
int64_t BlockPageBytes(const KvCacheSpec& spec) {
  return spec.block_size * spec.num_kv_heads * spec.head_dim * spec.value_bytes();
}
int64_t BlockScaleBytes(const KvCacheSpec& spec) {
  return spec.dtype == DType::kI8 ? spec.block_size * spec.num_kv_heads * 4 : 0;
}
}  // namespace

int64_t KvStorage::block_bytes() const {
  const int64_t planes = has_v() ? 2 : 1;
  return spec_.num_layers * planes * (BlockPageBytes(spec_) + BlockScaleBytes(spec_));
}

void KvStorage::CopyBlockOut(int64_t block, uint8_t* out) const {
  KV_CHECK(block >= 0 && block < num_blocks_) << "block " << block;
  const int64_t page = BlockPageBytes(spec_);
  const int64_t scale = BlockScaleBytes(spec_);
  for (const Layer& L : layers_) {
    out = std::copy_n(L.k.get() + block * page, page, out);
    if (has_v()) out = std::copy_n(L.v.get() + block * page, page, out);
    if (scale > 0) {
      const auto* ks = reinterpret_cast<const uint8_t*>(L.k_scales.get());
      out = std::copy_n(ks + block * scale, scale, out);
      if (has_v()) {
        const auto* vs = reinterpret_cast<const uint8_t*>(L.v_scales.get());
        out = std::copy_n(vs + block * scale, scale, out);
      }
    }
  }
}

void KvStorage::CopyBlockIn(int64_t block, const uint8_t* in) {
  KV_CHECK(block >= 0 && block < num_blocks_) << "block " << block;
  const int64_t page = BlockPageBytes(spec_);
  const int64_t scale = BlockScaleBytes(spec_);
  for (Layer& L : layers_) {
    std::copy_n(in, page, L.k.get() + block * page);
    in += page;
    if (has_v()) {
      std::copy_n(in, page, L.v.get() + block * page);
      in += page;
    }
    if (scale > 0) {
      std::copy_n(in, scale, reinterpret_cast<uint8_t*>(L.k_scales.get()) + block * scale);
      in += scale;
      if (has_v()) {
        std::copy_n(in, scale, reinterpret_cast<uint8_t*>(L.v_scales.get()) + block * scale);
        in += scale;
      }
    }
  }
}

StatusOr<std::unique_ptr<KvStorage>> KvStorage::Create(const KvCacheSpec& spec,
                                                       int64_t num_blocks) {
  KV_RETURN_IF_ERROR(spec.Validate());
  if (num_blocks <= 0) return InvalidArgumentError("KV storage needs at least one block");
  const double want_bytes = static_cast<double>(num_blocks) *
                           static_cast<double>(spec.bytes_per_block());
  if (want_bytes > 4.0e18) {
    return ResourceExhaustedError("a KV cache of " + std::to_string(num_blocks) +
                                  " blocks is too large to allocate");
  }
  std::unique_ptr<KvStorage> s(new KvStorage(spec, num_blocks));
  const int64_t kv_dim = spec.num_kv_heads * spec.head_dim;
  const int64_t slots = num_blocks * spec.block_size;
  const int64_t page_bytes = slots * kv_dim * spec.value_bytes();
  const int64_t scale_bytes = spec.dtype == DType::kI8 ? slots * spec.num_kv_heads * 4 : 0;
  const int64_t planes = s->has_v() ? 2 : 1;  // MLA: the latent rows only
  s->layers_.resize(static_cast<size_t>(spec.num_layers));
  for (Layer& layer : s->layers_) {
    layer.k.reset(static_cast<uint8_t*>(AllocateLargeBuffer(page_bytes)));
    if (planes == 2) layer.v.reset(static_cast<uint8_t*>(AllocateLargeBuffer(page_bytes)));
    bool ok = layer.k && (planes == 1 || layer.v);
    if (scale_bytes > 0) {
      layer.k_scales.reset(static_cast<float*>(AllocateLargeBuffer(scale_bytes)));
      if (planes == 2) layer.v_scales.reset(static_cast<float*>(AllocateLargeBuffer(scale_bytes)));
      ok = ok && layer.k_scales && (planes == 1 || layer.v_scales);
    }
    if (!ok) {
      return ResourceExhaustedError("could not allocate " +
                                    FormatBytesDecimalAndBinary(static_cast<double>(
                                        spec.num_layers * planes * (page_bytes + scale_bytes))) +
                                    " of KV cache");
    }
    s->total_bytes_ += planes * (page_bytes + scale_bytes);
  }
  s->total_bytes_ += spec.fixed_scale_bytes();
  s->quant_stats_.clipped_k.assign(static_cast<size_t>(spec.num_layers), 0);
  s->quant_stats_.clipped_v.assign(static_cast<size_t>(spec.num_layers), 0);
  return s;
}

Status KvStorage::SetScales(KvScales scales) {
  if (!IsFp8(spec_.dtype)) {
    return InvalidArgumentError(std::string("KV dtype ") + DTypeName(spec_.dtype) +
                                " takes no fixed scales");
  }
  const size_t n = static_cast<size_t>(spec_.num_layers * spec_.num_kv_heads);
  if (scales.k.size() != n || scales.v.size() != n) {
    return InvalidArgumentError("fp8 KV scales: expected " + std::to_string(n) +
                                " per K and V (layers x KV heads), got " +
                                std::to_string(scales.k.size()) + " and " +
                                std::to_string(scales.v.size()));
  }
  for (size_t i = 0; i < n; ++i) {
    if (!(scales.k[i] > 0.0f) || !std::isfinite(scales.k[i]) || !(scales.v[i] > 0.0f) ||
        !std::isfinite(scales.v[i])) {
      return InvalidArgumentError("fp8 KV scales must be positive and finite");
    }
  }
  inv_k_scales_.resize(n);
  inv_v_scales_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    inv_k_scales_[i] = 1.0f / scales.k[i];
    inv_v_scales_[i] = 1.0f / scales.v[i];
  }
  scales_ = std::move(scales);
  return OkStatus();
}

const float* KvStorage::k_head_scales(int64_t layer) const {
  return scales_.k.empty() ? nullptr : scales_.k.data() + layer * spec_.num_kv_heads;
}
const float* KvStorage::v_head_scales(int64_t layer) const {
  if (!has_v()) return k_head_scales(layer);
  return scales_.v.empty() ? nullptr : scales_.v.data() + layer * spec_.num_kv_heads;
}

void KvStorage::observe_absmax(bool on) {
  observing_ = on;
  const size_t n = static_cast<size_t>(spec_.num_layers * spec_.num_kv_heads);
  if (on && absmax_k_.size() != n) {
    absmax_k_.assign(n, 0.0f);
    absmax_v_.assign(n, 0.0f);
    const size_t nc = n * static_cast<size_t>(spec_.head_dim);
    for (int i = 0; i < 2; ++i) {
      sum_[i].assign(nc, 0.0);
      min_[i].assign(nc, INFINITY);
      max_[i].assign(nc, -INFINITY);
    }
    observed_tokens_.assign(static_cast<size_t>(spec_.num_layers), 0);
  }
}

std::vector<float> KvStorage::observed_mean(bool keys) const {
  const std::vector<double>& sum = sum_[keys ? 0 : 1];
  std::vector<float> mean(sum.size(), 0.0f);
  const size_t per_layer = static_cast<size_t>(spec_.num_kv_heads * spec_.head_dim);
  for (size_t i = 0; i < sum.size(); ++i) {
    const int64_t n = observed_tokens_[i / per_layer];
    mean[i] = n > 0 ? static_cast<float>(sum[i] / static_cast<double>(n)) : 0.0f;
  }
  return mean;
}

std::vector<float> KvStorage::observed_centered_absmax(bool keys,
                                                       const std::vector<float>& mean) const {
  const int w = keys ? 0 : 1;
  KV_CHECK_EQ(mean.size(), sum_[w].size());
  std::vector<float> absmax(mean.size(), 0.0f);
  for (size_t i = 0; i < mean.size(); ++i) {
    if (min_[w][i] > max_[w][i]) continue;  // never observed
    absmax[i] = std::max(std::fabs(max_[w][i] - mean[i]), std::fabs(min_[w][i] - mean[i]));
  }
  return absmax;
}

Status KvStorage::SetChannelNorm(ChannelNorm norm) {
  const size_t n = static_cast<size_t>(spec_.num_layers * spec_.num_kv_heads * spec_.head_dim);
  for (const auto* vec : {&norm.k_mean, &norm.k_scale, &norm.v_mean, &norm.v_scale}) {
    if (vec->size() != n) {
      return InvalidArgumentError("KV channel normalization: expected " + std::to_string(n) +
                                  " values for each of K/V means and scales");
    }
    for (float m : *vec) {
      if (!std::isfinite(m)) {
        return InvalidArgumentError("KV channel normalization values must be finite");
      }
    }
  }
  for (const auto* vec : {&norm.k_scale, &norm.v_scale}) {
    for (float m : *vec) {
      if (!(m > 0.0f)) return InvalidArgumentError("KV channel scales must be positive");
    }
  }
  inv_k_scale_.resize(n);
  inv_v_scale_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    inv_k_scale_[i] = 1.0f / norm.k_scale[i];
    inv_v_scale_[i] = 1.0f / norm.v_scale[i];
  }
  norm_ = std::move(norm);
  normalized_.resize(static_cast<size_t>(spec_.head_dim));
  return OkStatus();
}

const float* KvStorage::key_channel_scale(int64_t layer) const {
  return norm_.k_scale.empty() ? nullptr
                               : norm_.k_scale.data() + layer * spec_.num_kv_heads * spec_.head_dim;
}
const float* KvStorage::value_channel_scale(int64_t layer) const {
  if (!has_v()) return key_channel_scale(layer);
  return norm_.v_scale.empty() ? nullptr
                               : norm_.v_scale.data() + layer * spec_.num_kv_heads * spec_.head_dim;
}
const float* KvStorage::key_channel_mean(int64_t layer) const {
  return norm_.k_mean.empty() ? nullptr
                              : norm_.k_mean.data() + layer * spec_.num_kv_heads * spec_.head_dim;
}

const float* KvStorage::value_channel_mean(int64_t layer) const {
  if (!has_v()) return key_channel_mean(layer);
  return norm_.v_mean.empty() ? nullptr
                              : norm_.v_mean.data() + layer * spec_.num_kv_heads * spec_.head_dim;
}

namespace {

// Converts one head's values (hd floats) into the slot's storage. Returns the clipped count.
int64_t StoreHead(DType dtype, const float* x, int64_t hd, float inv_scale, uint8_t* dst,
                  float* token_scale) {
  int64_t clipped = 0;
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      QuantizeRow(dtype, x, dst, hd);
      break;
    case DType::kFp8E4M3:
    case DType::kFp8E5M2: {
      const bool e4m3 = dtype == DType::kFp8E4M3;
      for (int64_t i = 0; i < hd; ++i) {
        bool c = false;
        dst[i] = e4m3 ? Fp32ToFp8E4M3(x[i] * inv_scale, &c) : Fp32ToFp8E5M2(x[i] * inv_scale, &c);
        clipped += c;
      }
      break;
    }
    case DType::kI8: {
      float amax = 0.0f;
      for (int64_t i = 0; i < hd; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float scale = amax / 127.0f;
      const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
      int8_t* q = reinterpret_cast<int8_t*>(dst);
      for (int64_t i = 0; i < hd; ++i) {
        const long r = std::lround(x[i] * inv);
        q[i] = static_cast<int8_t>(std::clamp<long>(r, -127, 127));
      }
      *token_scale = scale;
      break;
    }
    default:
      KV_CHECK(false) << "KV dtype " << DTypeName(dtype);
  }
  return clipped;
}

}  // namespace

void KvStorage::Write(int64_t layer, const int64_t* slots, int64_t num_tokens, const float* k,
                      const float* v) {
  KV_CHECK(layer >= 0 && layer < spec_.num_layers) << "layer " << layer;
  const DType dtype = spec_.dtype;
  KV_CHECK(!IsFp8(dtype) || has_scales()) << "fp8 KV written before its scales were set";
  const int64_t heads = spec_.num_kv_heads, hd = spec_.head_dim, kv_dim = heads * hd;
  const int64_t value_bytes = spec_.value_bytes();
  Layer& L = layers_[static_cast<size_t>(layer)];
  int64_t clipped_k = 0, clipped_v = 0;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = slots[t];
    KV_CHECK(slot >= 0 && slot < num_slots()) << "slot " << slot << " outside the pool";
    const float* kt = k + t * kv_dim;
    const float* vt = has_v() ? v + t * kv_dim : kt;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t elem = (slot * heads + h) * hd;
      const size_t sh = static_cast<size_t>(layer * heads + h);
      const float inv_k = IsFp8(dtype) ? inv_k_scales_[sh] : 1.0f;
      const float inv_v = IsFp8(dtype) ? inv_v_scales_[sh] : 1.0f;
      float* ks = dtype == DType::kI8 ? L.k_scales.get() + slot * heads + h : nullptr;
      float* vs = dtype == DType::kI8 && has_v() ? L.v_scales.get() + slot * heads + h : nullptr;
      const float* kh = kt + h * hd;
      const float* vh = vt + h * hd;
      if (observing_) {
        for (int64_t i = 0; i < hd; ++i) {
          const size_t c = sh * static_cast<size_t>(hd) + static_cast<size_t>(i);
          absmax_k_[sh] = std::max(absmax_k_[sh], std::fabs(kh[i]));
          absmax_v_[sh] = std::max(absmax_v_[sh], std::fabs(vh[i]));
          const float x[2] = {kh[i], vh[i]};
          for (int w = 0; w < 2; ++w) {
            sum_[w][c] += x[w];
            min_[w][c] = std::min(min_[w][c], x[w]);
            max_[w][c] = std::max(max_[w][c], x[w]);
          }
        }
      }
      if (has_channel_norm()) {
        const size_t c0 = sh * static_cast<size_t>(hd);
        for (int64_t i = 0; i < hd; ++i) {
          const size_t c = c0 + static_cast<size_t>(i);
          normalized_[static_cast<size_t>(i)] = (kh[i] - norm_.k_mean[c]) * inv_k_scale_[c];
        }
        kh = normalized_.data();
      }
      clipped_k += StoreHead(dtype, kh, hd, inv_k, L.k.get() + elem * value_bytes, ks);
      if (!has_v()) continue;
      if (has_channel_norm()) {
        const size_t c0 = sh * static_cast<size_t>(hd);
        for (int64_t i = 0; i < hd; ++i) {
          const size_t c = c0 + static_cast<size_t>(i);
          normalized_[static_cast<size_t>(i)] = (vh[i] - norm_.v_mean[c]) * inv_v_scale_[c];
        }
        vh = normalized_.data();
      }
      clipped_v += StoreHead(dtype, vh, hd, inv_v, L.v.get() + elem * value_bytes, vs);
    }
  }
  if (observing_) observed_tokens_[static_cast<size_t>(layer)] += num_tokens;
  quant_stats_.clipped_k[static_cast<size_t>(layer)] += clipped_k;
  quant_stats_.clipped_v[static_cast<size_t>(layer)] += clipped_v;
}

void KvStorage::GatherHeadSlots(int64_t layer, const std::vector<std::vector<int64_t>>& slots,
                                SlotRows* rows) const {
  const int64_t heads = spec_.num_kv_heads;
  KV_CHECK(layer >= 0 && layer < spec_.num_layers);
  KV_CHECK_EQ(static_cast<int64_t>(slots.size()), heads);
  const Layer& L = layers_[static_cast<size_t>(layer)];
  const int64_t row_bytes = spec_.head_dim * spec_.value_bytes();
  const bool int8 = spec_.dtype == DType::kI8;
  rows->bytes.clear();
  rows->scales.clear();
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t slot : slots[h]) {
      KV_CHECK(slot >= 0 && slot < num_slots()) << "slot " << slot;
      const int64_t index = slot * heads + h;
      const uint8_t* k = L.k.get() + index * row_bytes;
      rows->bytes.insert(rows->bytes.end(), k, k + row_bytes);
      if (int8) rows->scales.push_back(L.k_scales.get()[index]);
      if (!has_v()) continue;
      const uint8_t* v = L.v.get() + index * row_bytes;
      rows->bytes.insert(rows->bytes.end(), v, v + row_bytes);
      if (int8) rows->scales.push_back(L.v_scales.get()[index]);
    }
  }
}

void KvStorage::ScatterHeadSlots(int64_t layer, const std::vector<std::vector<int64_t>>& slots,
                                 const SlotRows& rows) {
  const int64_t heads = spec_.num_kv_heads;
  KV_CHECK(layer >= 0 && layer < spec_.num_layers);
  KV_CHECK_EQ(static_cast<int64_t>(slots.size()), heads);
  Layer& L = layers_[static_cast<size_t>(layer)];
  const int64_t row_bytes = spec_.head_dim * spec_.value_bytes();
  const bool int8 = spec_.dtype == DType::kI8;
  const int64_t planes = has_v() ? 2 : 1;
  int64_t row = 0;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t slot : slots[h]) {
      KV_CHECK(slot >= 0 && slot < num_slots()) << "slot " << slot;
      KV_CHECK_LE((row + 1) * planes * row_bytes, static_cast<int64_t>(rows.bytes.size()))
          << "more slots than gathered rows";
      const int64_t index = slot * heads + h;
      const uint8_t* src = rows.bytes.data() + row * planes * row_bytes;
      std::copy(src, src + row_bytes, L.k.get() + index * row_bytes);
      if (int8) L.k_scales.get()[index] = rows.scales[static_cast<size_t>(planes * row)];
      if (planes == 2) {
        std::copy(src + row_bytes, src + 2 * row_bytes, L.v.get() + index * row_bytes);
        if (int8) L.v_scales.get()[index] = rows.scales[static_cast<size_t>(2 * row + 1)];
      }
      ++row;
    }
  }
  KV_CHECK_EQ(row * planes * row_bytes, static_cast<int64_t>(rows.bytes.size()))
      << "fewer slots than gathered rows";
}

void KvStorage::MoveHeadSlots(int64_t layer, const std::vector<std::vector<int64_t>>& from,
                              const std::vector<std::vector<int64_t>>& to) {
  SlotRows rows;
  GatherHeadSlots(layer, from, &rows);
  ScatterHeadSlots(layer, to, rows);
}

void KvStorage::ReadSlot(int64_t layer, int64_t slot, float* k, float* v) const {
  KV_CHECK(layer >= 0 && layer < spec_.num_layers && slot >= 0 && slot < num_slots());
  const int64_t heads = spec_.num_kv_heads, hd = spec_.head_dim;
  const Layer& L = layers_[static_cast<size_t>(layer)];
  const int64_t value_bytes = spec_.value_bytes();
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t elem = (slot * heads + h) * hd;
    float k_scale = 1.0f, v_scale = 1.0f;
    const DType raw = spec_.dtype;
    if (IsFp8(raw)) {
      k_scale = scales_.k[static_cast<size_t>(layer * heads + h)];
      v_scale = scales_.v[static_cast<size_t>(layer * heads + h)];
    }
    if (raw == DType::kI8) {
      k_scale = L.k_scales.get()[slot * heads + h];
      if (has_v()) v_scale = L.v_scales.get()[slot * heads + h];
    }
    // One plane at a time: K, then V where the cache has one.
    for (int plane = 0; plane < (has_v() ? 2 : 1); ++plane) {
      const uint8_t* src = (plane == 0 ? L.k.get() : L.v.get()) + elem * value_bytes;
      float* dst = (plane == 0 ? k : v) + h * hd;
      const float scale = plane == 0 ? k_scale : v_scale;
      if (raw == DType::kI8) {
        const int8_t* q = reinterpret_cast<const int8_t*>(src);
        for (int64_t i = 0; i < hd; ++i) dst[i] = q[i] * scale;
      } else {
        DequantizeRow(raw, src, dst, hd);
        for (int64_t i = 0; i < hd; ++i) dst[i] *= scale;
      }
    }
  }
  // MLA: the values are the latent row's first channels; v (optional) gets the whole row.
  if (!has_v() && v != nullptr) std::copy(k, k + heads * hd, v);
}

KvScales Fp8ScalesFromAbsmax(DType dtype, const std::vector<float>& absmax_k,
                             const std::vector<float>& absmax_v, float headroom) {
  const float max = dtype == DType::kFp8E5M2 ? kFp8E5M2Max : kFp8E4M3Max;
  KvScales scales;
  auto one = [&](float amax) { return amax > 0.0f ? amax * headroom / max : 1.0f / max; };
  for (float a : absmax_k) scales.k.push_back(one(a));
  for (float a : absmax_v) scales.v.push_back(one(a));
  return scales;
}

}  // namespace kvserve

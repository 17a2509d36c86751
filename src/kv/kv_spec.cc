#include "kv/kv_spec.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>

namespace kvserve {

const char* KvLayoutName(KvLayout layout) {
  return layout == KvLayout::kSeparateKv ? "separate_kv" : "mla_latent";
}

bool IsKvCacheDtype(DType dtype) {
  switch (dtype) {
    case DType::kF32: case DType::kF16: case DType::kBF16: case DType::kFp8E4M3:
    case DType::kFp8E5M2: case DType::kI8:
      return true;
    default:
      return false;
  }
}

Status KvCacheSpec::Validate() const {
  if (!IsKvCacheDtype(dtype)) {
    return InvalidArgumentError(std::string("KV cache dtype ") + DTypeName(dtype) +
                                " is not supported (f32, f16, bf16, fp8_e4m3, fp8_e5m2, int8)");
  }
  if (num_layers <= 0) return InvalidArgumentError("KV cache: num_layers must be positive");
  if (block_size <= 0 || block_size > 4096) {
    return InvalidArgumentError("--block-size must be in [1, 4096], got " +
                                std::to_string(block_size));
  }
  if (layout == KvLayout::kSeparateKv) {
    if (num_kv_heads <= 0 || head_dim <= 0) {
      return InvalidArgumentError("KV cache: num_kv_heads and head_dim must be positive");
    }
  } else if (latent_dim <= 0 || rope_dim < 0) {
    return InvalidArgumentError("MLA KV cache: latent_dim must be positive, rope_dim >= 0");
  } else if (num_kv_heads != 1 || head_dim != latent_dim + rope_dim) {
    return InvalidArgumentError("MLA KV cache: one KV head of latent_dim + rope_dim values "
                                "(KvCacheSpec::MlaLatent)");
  }
  return OkStatus();
}

KvCacheSpec KvCacheSpec::MlaLatent(int64_t num_layers, int64_t latent_dim, int64_t rope_dim,
                                   DType dtype, int64_t block_size) {
  KvCacheSpec spec;
  spec.layout = KvLayout::kMlaLatent;
  spec.num_layers = num_layers;
  spec.latent_dim = latent_dim;
  spec.rope_dim = rope_dim;
  spec.num_kv_heads = 1;
  spec.head_dim = latent_dim + rope_dim;
  spec.dtype = dtype;
  spec.block_size = block_size;
  return spec;
}

int64_t KvCacheSpec::values_per_token_per_layer() const {
  return layout == KvLayout::kSeparateKv ? 2 * num_kv_heads * head_dim : latent_dim + rope_dim;
}

int64_t KvCacheSpec::scales_per_token_per_layer() const {
  if (dtype != DType::kI8) return 0;
  return layout == KvLayout::kSeparateKv ? 2 * num_kv_heads : 1;
}

int64_t KvCacheSpec::bytes_per_token() const {
  return num_layers * (values_per_token_per_layer() * value_bytes() +
                       scales_per_token_per_layer() * kKvScaleBytes);
}

int64_t KvCacheSpec::bytes_per_block() const { return bytes_per_token() * block_size; }

int64_t KvCacheSpec::fixed_scale_bytes() const {
  if (dtype != DType::kFp8E4M3 && dtype != DType::kFp8E5M2) return 0;
  const int64_t groups = layout == KvLayout::kSeparateKv ? 2 * num_kv_heads : 1;
  return num_layers * groups * kKvScaleBytes;
}

int64_t KvCacheSpec::blocks_for_tokens(int64_t num_tokens) const {
  return num_tokens <= 0 ? 0 : (num_tokens + block_size - 1) / block_size;
}

std::string KvCacheSpec::ToString() const {
  std::string s = std::to_string(num_layers) + " layers x ";
  if (layout == KvLayout::kSeparateKv) {
    s += std::to_string(num_kv_heads) + " KV heads x " + std::to_string(head_dim);
  } else {
    s += "MLA latent " + std::to_string(latent_dim) + " + rope " + std::to_string(rope_dim);
  }
  return s + ", " + DTypeName(dtype) + ", " + std::to_string(block_size) + "-token blocks";
}

StatusOr<DType> ParseKvCacheDtype(std::string_view name, DType auto_dtype) {
  if (name == "auto") return auto_dtype;
  if (name == "f32" || name == "float32" || name == "float") return DType::kF32;
  if (name == "f16" || name == "float16" || name == "half") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "fp8" || name == "fp8_e4m3") return DType::kFp8E4M3;
  if (name == "fp8_e5m2") return DType::kFp8E5M2;
  if (name == "int8") return DType::kI8;
  return InvalidArgumentError("unknown --kv-cache-dtype '" + std::string(name) +
                              "' (auto, f32, f16, bf16, fp8, fp8_e4m3, fp8_e5m2, int8)");
}

StatusOr<int64_t> ParseByteSize(std::string_view text) {
  const std::string s(text);
  const auto bad = [&] {
    return InvalidArgumentError("bad byte size '" + s +
                                "' (examples: 4GiB, 512MiB, 1.5GB, 1073741824)");
  };
  if (s.empty()) return bad();
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(s, &used);
  } catch (...) {
    return bad();
  }
  std::string suffix = s.substr(used);
  while (!suffix.empty() && suffix.front() == ' ') suffix.erase(suffix.begin());
  for (char& c : suffix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double mult = 1;
  if (suffix.empty() || suffix == "b") {
    mult = 1;
  } else if (suffix == "k" || suffix == "kib") {
    mult = 1024.0;
  } else if (suffix == "m" || suffix == "mib") {
    mult = 1024.0 * 1024;
  } else if (suffix == "g" || suffix == "gib") {
    mult = 1024.0 * 1024 * 1024;
  } else if (suffix == "t" || suffix == "tib") {
    mult = 1024.0 * 1024 * 1024 * 1024;
  } else if (suffix == "kb") {
    mult = 1e3;
  } else if (suffix == "mb") {
    mult = 1e6;
  } else if (suffix == "gb") {
    mult = 1e9;
  } else if (suffix == "tb") {
    mult = 1e12;
  } else {
    return bad();
  }
  const double bytes = value * mult;
  if (!std::isfinite(bytes) || bytes < 0 || bytes > 9.0e18) return bad();
  return static_cast<int64_t>(std::llround(bytes));
}

namespace {

// `bytes` in the largest unit of `base` (1000 or 1024) whose value, rounded to two decimals,
// stays below `base`: 999999 B is "1.00 MB", not "1000.00 KB". Whole bytes have no decimals.
std::string FormatBytesIn(double bytes, double base, const char* const* units) {
  int u = 0;
  double v = bytes;
  while (u < 5 && std::fabs(std::round(v * 100.0) / 100.0) >= base) v /= base, ++u;
  char buf[48];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%.0f B", bytes);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f %s", v, units[u]);
  }
  return buf;
}

}  // namespace

std::string FormatBytesDecimalAndBinary(double bytes) {
  static const char* const kDecimal[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  static const char* const kBinary[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  const std::string decimal = FormatBytesIn(bytes, 1000.0, kDecimal);
  // Below 1000 bytes both renderings are the same plain count: print it once.
  if (std::fabs(bytes) < 1000.0) return decimal;
  return decimal + " (" + FormatBytesIn(bytes, 1024.0, kBinary) + ")";
}

}  // namespace kvserve

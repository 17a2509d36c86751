#include "model/quant_mix.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace kvserve {
namespace {

struct FileTypeInfo {
  QuantFileType type;
  const char* name;
  uint32_t llama_ftype;  // LLAMA_FTYPE_* in llama.h
  DType base;            // llama_ftype_get_default_type
};

constexpr FileTypeInfo kFileTypes[] = {
    {QuantFileType::kF32, "f32", 0, DType::kF32},
    {QuantFileType::kF16, "f16", 1, DType::kF16},
    {QuantFileType::kBF16, "bf16", 32, DType::kBF16},
    {QuantFileType::kQ8_0, "q8_0", 7, DType::kQ8_0},
    {QuantFileType::kQ4_0, "q4_0", 2, DType::kQ4_0},
    {QuantFileType::kQ4_1, "q4_1", 3, DType::kQ4_1},
    {QuantFileType::kQ5_0, "q5_0", 8, DType::kQ5_0},
    {QuantFileType::kQ5_1, "q5_1", 9, DType::kQ5_1},
    {QuantFileType::kQ2_K, "q2_k", 10, DType::kQ2_K},
    {QuantFileType::kQ3_K_S, "q3_k_s", 11, DType::kQ3_K},
    {QuantFileType::kQ3_K_M, "q3_k_m", 12, DType::kQ3_K},
    {QuantFileType::kQ3_K_L, "q3_k_l", 13, DType::kQ3_K},
    {QuantFileType::kQ4_K_S, "q4_k_s", 14, DType::kQ4_K},
    {QuantFileType::kQ4_K_M, "q4_k_m", 15, DType::kQ4_K},
    {QuantFileType::kQ5_K_S, "q5_k_s", 16, DType::kQ5_K},
    {QuantFileType::kQ5_K_M, "q5_k_m", 17, DType::kQ5_K},
    {QuantFileType::kQ6_K, "q6_k", 18, DType::kQ6_K},
};

const FileTypeInfo& Info(QuantFileType type) {
  for (const FileTypeInfo& i : kFileTypes) {
    if (i.type == type) return i;
  }
  return kFileTypes[0];
}

// llama.cpp's tensor categories (tensor_get_category), for the tensor names we write.
enum class Category {
  kTokenEmbd, kOutput, kAttnV, kAttnK, kAttnQ, kAttnOutput, kAttnQkv, kFfnDown, kFfnGate,
  kFfnUp, kOther,
};

bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

Category CategoryOf(std::string_view name) {
  if (name == "output.weight") return Category::kOutput;
  if (name == "token_embd.weight") return Category::kTokenEmbd;
  if (Contains(name, "attn_qkv.weight")) return Category::kAttnQkv;
  // attn_kv_b (DeepSeek's joint K/V up-projection) counts as attn_v; the split attn_k_b /
  // attn_v_b do not match any category (llama.cpp matches "attn_v.weight" exactly).
  if (Contains(name, "attn_kv_b.weight") || Contains(name, "attn_v.weight")) {
    return Category::kAttnV;
  }
  if (Contains(name, "attn_k.weight")) return Category::kAttnK;
  if (Contains(name, "attn_q.weight")) return Category::kAttnQ;
  if (Contains(name, "attn_output.weight")) return Category::kAttnOutput;
  // Substrings, as llama.cpp matches them: ffn_down_exps and ffn_down_shexp are ffn_down too.
  if (Contains(name, "ffn_up")) return Category::kFfnUp;
  if (Contains(name, "ffn_gate")) return Category::kFfnGate;
  if (Contains(name, "ffn_down")) return Category::kFfnDown;
  return Category::kOther;
}

// tensor_allows_quantization: 2-D and 3-D "*weight" tensors except norms and the router.
bool AllowsQuantization(std::string_view name, const std::vector<int64_t>& shape) {
  if (shape.size() < 2) return false;
  if (name.size() < 6 || name.substr(name.size() - 6) != "weight") return false;
  if (Contains(name, "_norm.weight")) return false;
  if (Contains(name, "ffn_gate_inp.weight")) return false;
  // BERT's token-type and position tables: llama.cpp adds them as f32 (ggml's add takes no
  // other type there).
  if (Contains(name, "token_types.weight") || Contains(name, "position_embd.weight")) return false;
  return true;
}

// The N of "blk.N.", else -1.
int64_t LayerOf(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return -1;
  int64_t layer = -1;
  const char* begin = name.data() + kPrefix.size();
  const char* end = name.data() + name.size();
  auto [ptr, ec] = std::from_chars(begin, end, layer);
  if (ec != std::errc() || ptr == end || *ptr != '.') return -1;
  return layer;
}

bool IsAnyOf(QuantFileType t, std::initializer_list<QuantFileType> set) {
  return std::find(set.begin(), set.end(), t) != set.end();
}

// llama_tensor_get_type_impl for the file types we write (no IQ types, no imatrix, no
// Falcon): the type before the row-length fallback.
DType MixRule(QuantFileType ftype, const QuantMixModel& m, std::string_view name,
              const std::vector<int64_t>& shape, Category category) {
  using F = QuantFileType;
  DType type = Info(ftype).base;
  const int64_t cols = shape.back();
  const int64_t layer = LayerOf(name);
  // llama.cpp counts attn_v / ffn_down tensors in file order (sorted by layer), which for
  // one such tensor per layer (or expert tensors, whose layer it parses from the name) is
  // the layer index; n_layers is the layer count either way.
  const int64_t n = m.num_layers;
  const bool more_bits = layer >= 0 && QuantMixUseMoreBits(layer, n);

  if (category == Category::kOutput ||
      (!m.has_output_weight && category == Category::kTokenEmbd)) {
    if (cols % DTypeBlockElems(type) != 0) return DType::kQ8_0;
    return type == DType::kQ8_0 ? DType::kQ8_0 : DType::kQ6_K;
  }
  switch (category) {
    case Category::kAttnV:
      if (ftype == F::kQ2_K) {
        type = m.gqa >= 4 ? DType::kQ4_K : DType::kQ3_K;
      } else if (ftype == F::kQ3_K_M) {
        type = layer < 2 ? DType::kQ5_K : DType::kQ4_K;
      } else if (ftype == F::kQ3_K_L) {
        type = DType::kQ5_K;
      } else if ((ftype == F::kQ4_K_M || ftype == F::kQ5_K_M) && more_bits) {
        type = DType::kQ6_K;
      } else if (ftype == F::kQ4_K_S && layer < 4) {
        type = DType::kQ5_K;
      }
      // 70B: eight query heads share each attn_v row, so it is 8x smaller than attn_q.
      if (m.is_70b && (type == DType::kQ3_K || type == DType::kQ4_K)) type = DType::kQ5_K;
      if (m.num_experts == 8) type = DType::kQ8_0;
      return type;
    case Category::kAttnK:
      if (m.num_experts == 8) type = DType::kQ8_0;
      return type;
    case Category::kFfnDown:
      if (ftype == F::kQ2_K) {
        type = DType::kQ3_K;
      } else if (ftype == F::kQ3_K_M) {
        type = layer < n / 16 ? DType::kQ5_K : DType::kQ4_K;
      } else if (ftype == F::kQ3_K_L) {
        type = DType::kQ5_K;
      } else if (ftype == F::kQ4_K_M) {
        if (more_bits) type = DType::kQ6_K;
      } else if (ftype == F::kQ5_K_M && more_bits) {
        type = DType::kQ6_K;
      } else if (ftype == F::kQ4_K_S && layer < n / 8) {
        type = DType::kQ5_K;
      }
      return type;
    case Category::kAttnOutput:
      if (m.num_experts == 8) {
        if (IsAnyOf(ftype, {F::kQ2_K, F::kQ3_K_S, F::kQ3_K_M, F::kQ4_K_S, F::kQ4_K_M})) {
          type = DType::kQ5_K;
        }
      } else if (ftype == F::kQ2_K) {
        type = DType::kQ3_K;
      } else if (ftype == F::kQ3_K_M) {
        type = DType::kQ4_K;
      } else if (ftype == F::kQ3_K_L) {
        type = DType::kQ5_K;
      }
      return type;
    case Category::kAttnQkv:
      if (ftype == F::kQ3_K_M || ftype == F::kQ3_K_L) {
        type = DType::kQ4_K;
      } else if (ftype == F::kQ4_K_M) {
        type = DType::kQ5_K;
      } else if (ftype == F::kQ5_K_M) {
        type = DType::kQ6_K;
      }
      return type;
    default:
      return type;
  }
}

// tensor_type_fallback: a type whose blocks fit rows of `cols` values.
DType Fallback(DType type, int64_t cols) {
  if (cols % DTypeBlockElems(type) == 0) return type;
  DType fallback = DType::kF16;
  switch (type) {
    // llama.cpp falls back to IQ4_NL here in older versions and to Q4_0 in newer ones; we
    // have no IQ4_NL, so Q4_0 either way.
    case DType::kQ2_K: case DType::kQ3_K: fallback = DType::kQ4_0; break;
    case DType::kQ4_K: fallback = DType::kQ5_0; break;
    case DType::kQ5_K: fallback = DType::kQ5_1; break;
    case DType::kQ6_K: fallback = DType::kQ8_0; break;
    // llama.cpp has no fallback for the 32-value types (it stops with an error); f16 keeps
    // such a tensor exact instead.
    default: break;
  }
  return cols % DTypeBlockElems(fallback) == 0 ? fallback : DType::kF16;
}

}  // namespace

const char* QuantFileTypeName(QuantFileType type) { return Info(type).name; }

std::vector<std::string> QuantFileTypeNames() {
  std::vector<std::string> names;
  for (const FileTypeInfo& i : kFileTypes) names.emplace_back(i.name);
  return names;
}

std::optional<QuantFileType> ParseQuantFileType(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "q3_k") return QuantFileType::kQ3_K_M;
  if (lower == "q4_k") return QuantFileType::kQ4_K_M;
  if (lower == "q5_k") return QuantFileType::kQ5_K_M;
  for (const FileTypeInfo& i : kFileTypes) {
    if (lower == i.name) return i.type;
  }
  return std::nullopt;
}

StatusOr<QuantFileType> ParseQuantFileTypeFlag(const std::string& name, std::string_view flag) {
  if (std::optional<QuantFileType> t = ParseQuantFileType(name)) return *t;
  std::string known;
  for (const std::string& n : QuantFileTypeNames()) known += (known.empty() ? "" : ", ") + n;
  return InvalidArgumentError(std::string(flag) + " must be one of " + known + "; got '" +
                              name + "'");
}

std::optional<QuantFileType> UniformQuantFileType(DType dtype) {
  switch (dtype) {
    case DType::kQ3_K: return QuantFileType::kQ3_K_M;
    case DType::kQ4_K: return QuantFileType::kQ4_K_M;
    case DType::kQ5_K: return QuantFileType::kQ5_K_M;
    default: break;
  }
  for (const FileTypeInfo& i : kFileTypes) {
    if (i.base == dtype) return i.type;
  }
  return std::nullopt;
}

uint32_t LlamaFtype(QuantFileType type) { return Info(type).llama_ftype; }

DType QuantFileTypeBaseDType(QuantFileType type) { return Info(type).base; }

QuantMixModel QuantMixModelFor(const ModelConfig& c) {
  QuantMixModel m;
  m.architecture = c.architecture == "mistral" ? "llama" : c.architecture;
  m.num_layers = c.num_layers;
  if (c.is_mla()) {
    // The saved file's head_count_kv: 1 with split attn_k_b / attn_v_b, else num_heads.
    m.gqa = c.mla.split_kv_b ? c.num_heads : 1;
  } else {
    m.gqa = c.num_kv_heads > 0 ? c.num_heads / c.num_kv_heads : 1;
  }
  m.num_experts = c.moe.num_experts;
  m.has_output_weight = !c.tied_embeddings;
  m.is_70b = m.architecture == "llama" && c.num_layers == 80 && c.num_heads != c.num_kv_heads;
  return m;
}

bool QuantMixUseMoreBits(int64_t layer, int64_t num_layers) {
  return layer < num_layers / 8 || layer >= 7 * num_layers / 8 ||
         (layer - num_layers / 8) % 3 == 2;
}

DType QuantMixDType(QuantFileType type, const QuantMixModel& model, std::string_view name,
                    const std::vector<int64_t>& shape) {
  if (!AllowsQuantization(name, shape)) return DType::kF32;
  const DType base = Info(type).base;
  if (!IsGgmlBlockType(base)) return base;  // f32, f16, bf16: every matrix alike
  return Fallback(MixRule(type, model, name, shape, CategoryOf(name)), shape.back());
}

}  // namespace kvserve

// LoadGgufModel / SaveGgufModel: GGUF `llama`, `mistral` and `qwen2` models.
//
// RoPE: llama/mistral GGUF weights rotate interleaved pairs (llama.cpp LLAMA_ROPE_TYPE_NORM;
// convert_hf_to_gguf.py permutes the Q/K rows of HF checkpoints into that order); qwen2 uses
// NeoX pairs. Llama 3 RoPE scaling: llama.cpp stores it only as a `rope_freqs.weight` tensor
// of per-pair divisors. On load we fit the llama3 parameters (factor, low/high frequency
// factors, original context) to that tensor and refuse it when no llama3 schedule reproduces
// it; on save we write the tensor from the parameters. Linear scaling uses the
// `<arch>.rope.scaling.type` / `.factor` keys.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <numbers>
#include <set>

#include "base/logging.h"
#include "base/thread_pool.h"
#include "model/gguf.h"
#include "model/gguf_vocab.h"
#include "model/model_description.h"
#include "model/model_loader.h"
#include "model/model_tensors.h"
#include "model/vocab_source.h"

namespace kvserve {
namespace {

constexpr char kEogIdsKey[] = "kvserve.tokenizer.eog_token_ids";
constexpr char kPreRegexesKey[] = "kvserve.tokenizer.pre_regexes";
constexpr char kIgnoreMergesKey[] = "kvserve.tokenizer.bpe_ignore_merges";
constexpr char kBpePrefixSpaceKey[] = "kvserve.tokenizer.bpe_add_prefix_space";

// Per-pair llama3 divisors, as convert_hf_to_gguf.py computes them for rope_freqs.weight.
std::vector<float> Llama3Factors(const RopeOptions& rope, int64_t rotary_dim) {
  std::vector<float> out;
  const double factor = rope.scaling_factor, low = rope.llama3_low_freq_factor,
               high = rope.llama3_high_freq_factor;
  const double orig = static_cast<double>(rope.llama3_original_max_positions);
  const double low_wavelen = orig / low, high_wavelen = orig / high;
  for (int64_t i = 0; i < rotary_dim / 2; ++i) {
    double inv = std::pow(static_cast<double>(rope.theta), -2.0 * i / rotary_dim);
    double wavelen = 2.0 * std::numbers::pi / inv;
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(static_cast<float>(factor));
    } else {
      double smooth = (orig / wavelen - low) / (high - low);
      out.push_back(static_cast<float>(1.0 / ((1.0 - smooth) / factor + smooth)));
    }
  }
  return out;
}

bool FactorsMatch(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(std::fabs(a[i] - b[i]) <= 1e-3f * std::max(1.0f, std::fabs(b[i])))) return false;
  }
  return true;
}

// Finds llama3 parameters that reproduce `factors`; fills rope or returns an error.
Status FitLlama3Scaling(const std::vector<float>& factors, int64_t rotary_dim,
                        int64_t original_ctx, RopeOptions* rope) {
  float max_f = 1.0f;
  for (float f : factors) {
    if (!(std::isfinite(f) && f > 0.0f)) {
      return InvalidArgumentError("rope_freqs.weight holds a non-positive or non-finite value");
    }
    max_f = std::max(max_f, f);
  }
  if (max_f == 1.0f) return OkStatus();  // no scaling at all
  RopeOptions cand = *rope;
  cand.scaling = RopeScalingType::kLlama3;
  cand.scaling_factor = max_f;
  cand.llama3_original_max_positions = original_ctx > 0 ? original_ctx : 8192;
  // The smooth part is linear in the inverse frequency: s = A * inv + B with
  // A = orig / (2 pi (high - low)) and B = -low / (high - low). Fit it from two interior points.
  std::vector<std::pair<double, double>> pts;  // (inv, s)
  for (size_t i = 0; i < factors.size(); ++i) {
    double f = factors[i];
    if (f > 1.0 + 1e-4 && f < max_f - 1e-4 * max_f) {
      double inv = std::pow(static_cast<double>(rope->theta), -2.0 * i / rotary_dim);
      double s = (1.0 / f - 1.0 / max_f) / (1.0 - 1.0 / max_f);
      pts.emplace_back(inv, s);
    }
  }
  if (pts.size() >= 2 && pts.front().first != pts.back().first) {
    double a = (pts.front().second - pts.back().second) / (pts.front().first - pts.back().first);
    double b = pts.front().second - a * pts.front().first;
    if (a > 0.0) {
      double span = static_cast<double>(cand.llama3_original_max_positions) /
                    (2.0 * std::numbers::pi * a);
      cand.llama3_low_freq_factor = static_cast<float>(-b * span);
      cand.llama3_high_freq_factor = static_cast<float>(-b * span + span);
      if (FactorsMatch(Llama3Factors(cand, rotary_dim), factors)) {
        *rope = cand;
        return OkStatus();
      }
    }
  }
  for (float low : {1.0f, 2.0f}) {  // the published Llama 3.1 / 3.2 values first
    for (float high : {4.0f, 8.0f}) {
      cand.llama3_low_freq_factor = low;
      cand.llama3_high_freq_factor = high;
      if (FactorsMatch(Llama3Factors(cand, rotary_dim), factors)) {
        *rope = cand;
        return OkStatus();
      }
    }
  }
  return UnimplementedError(
      "rope_freqs.weight does not follow a llama3 RoPE scaling schedule; other per-frequency "
      "factors are not supported");
}

}  // namespace

StatusOr<LoadedModel> LoadGgufModel(const std::string& path, const LoadOptions& options) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  auto fail = [&](const Status& s) { return s.WithContext("GGUF model '" + path + "'"); };
  StatusOr<std::string> arch_or = file->GetString("general.architecture");
  if (!arch_or.ok()) return fail(arch_or.status());
  const std::string arch = *arch_or;
  if (arch != "llama" && arch != "mistral" && arch != "qwen2" && arch != "deepseek2" &&
      arch != "bert") {
    return fail(UnimplementedError("unsupported architecture '" + arch +
                                   "' (supported: llama, mistral, qwen2, deepseek2, bert)"));
  }
  // Keys the loader needs that a description may leave out.
  for (const char* key : {"context_length", "embedding_length", "feed_forward_length"}) {
    StatusOr<int64_t> v = file->GetInt(arch + "." + key);
    if (!v.ok()) return fail(v.status());
  }
  StatusOr<ModelDescription> description = DescribeGgufModel(*file, path);
  if (!description.ok()) return fail(description.status());
  if (arch != "deepseek2" && (description->is_mla() || description->config.moe.num_experts > 0)) {
    return fail(UnimplementedError("MLA attention and mixture-of-experts layers are only "
                                   "supported in deepseek2 models (kvserve plan can still size "
                                   "their KV cache)"));
  }
  if (arch == "deepseek2" && !description->is_mla()) {
    return fail(InvalidArgumentError("deepseek2 model without attention.kv_lora_rank"));
  }
  const std::string& scaling = description->rope_scaling_type;
  const bool yarn_ok = scaling == "yarn" && description->is_mla();  // DeepSeek's YaRN
  if (!scaling.empty() && scaling != "none" && scaling != "linear" && !yarn_ok) {
    return fail(UnimplementedError("unsupported RoPE scaling type '" + scaling +
                                   "' (supported: none, linear, llama3 via rope_freqs, yarn for "
                                   "deepseek2)"));
  }

  LoadedModel model;
  model.format = "gguf";
  model.path = path;
  model.config = description->config;
  ModelConfig& c = model.config;

  // Vocabulary (before tensor checks: its size may fix vocab_size).
  if (!options.tokenizer_path.empty()) {
    StatusOr<VocabSpec> vocab = LoadVocabFromPath(options.tokenizer_path, c.vocab_size);
    if (!vocab.ok()) return vocab.status();
    model.vocab = std::move(*vocab);
  } else if (file->Find("tokenizer.ggml.model") != nullptr) {
    StatusOr<VocabSpec> vocab = VocabSpecFromGguf(*file);
    if (!vocab.ok()) return fail(vocab.status());
    model.vocab = std::move(*vocab);
    if (const GgufValue* v = file->Find(kPreRegexesKey); v && v->type == GgufType::kArray) {
      model.vocab->pre_regexes = v->strings;
    }
    if (StatusOr<bool> b = file->GetBool(kIgnoreMergesKey); b.ok()) {
      model.vocab->bpe_ignore_merges = *b;
    }
    if (StatusOr<bool> b = file->GetBool(kBpePrefixSpaceKey); b.ok()) {
      model.vocab->bpe_add_prefix_space = *b;
    }
    if (const GgufValue* v = file->Find(kEogIdsKey); v && v->type == GgufType::kArray) {
      for (int64_t id : v->ints) {
        TokenId t = static_cast<TokenId>(id);
        if (id >= 0 && id < static_cast<int64_t>(model.vocab->tokens.size()) &&
            std::find(model.vocab->eog_ids.begin(), model.vocab->eog_ids.end(), t) ==
                model.vocab->eog_ids.end()) {
          model.vocab->eog_ids.push_back(t);
        }
      }
    }
  }
  StatusOr<std::string> tmpl = file->GetString("tokenizer.chat_template");
  if (tmpl.ok()) model.chat_template = *tmpl;

  const GgufTensorInfo* embd = file->FindTensor("token_embd.weight");
  if (embd == nullptr) return fail(NotFoundError("tensor token_embd.weight is missing"));
  if (embd->shape.size() != 2) {
    return fail(InvalidArgumentError("token_embd.weight must be 2-D"));
  }
  if (model.vocab.has_value() &&
      static_cast<int64_t>(model.vocab->tokens.size()) > c.vocab_size) {
    return fail(InvalidArgumentError(
        "the vocabulary has " + std::to_string(model.vocab->tokens.size()) +
        " tokens but the model only " + std::to_string(c.vocab_size) + " embedding rows"));
  }

  if (const GgufTensorInfo* rf = file->FindTensor("rope_freqs.weight")) {
    const int64_t rot = c.rope.rotary_dim;
    if (rf->shape != std::vector<int64_t>{rot / 2} ) {
      return fail(InvalidArgumentError("rope_freqs.weight must have shape [rotary_dim / 2]"));
    }
    StatusOr<Tensor> t = file->tensor("rope_freqs.weight");
    if (!t.ok()) return fail(t.status());
    StatusOr<Tensor> f32 = VectorToF32(*t, "rope_freqs.weight");
    if (!f32.ok()) return fail(f32.status());
    const float* f = static_cast<const float*>(f32->data);
    std::vector<float> factors(f, f + rot / 2);
    StatusOr<int64_t> orig = file->GetInt(arch + ".rope.scaling.original_context_length");
    if (!orig.ok() && orig.status().code() != StatusCode::kNotFound) return fail(orig.status());
    Status st = FitLlama3Scaling(factors, rot, orig.ok() ? *orig : 8192, &c.rope);
    if (!st.ok()) return fail(st);
  }
  Status valid = c.Validate();
  if (!valid.ok()) return fail(valid);

  Status collected = CollectModelTensors(
      c, [&](const std::string& n) { return file->tensor(n); }, &model.tensors);
  if (!collected.ok()) return fail(collected);
  if (options.progress) options.progress(model.WeightBytes(), model.WeightBytes());
  return model;
}

namespace {

// GGUF wants SentencePiece pieces with U+2581 and <0xXX> byte tokens; llama2.c tokenizer files
// store plain text. Returns the vocabulary as GGUF readers expect it.
VocabSpec ToGgufVocab(const VocabSpec& v) {
  if (!v.llama2c_format) return v;
  VocabSpec s = v;
  s.llama2c_format = false;
  s.model = VocabSpec::Model::kSpm;
  s.add_space_prefix = true;
  s.byte_fallback = true;
  s.token_types.assign(s.tokens.size(), TokenType::kNormal);
  if (s.unk_id == kNoToken) s.unk_id = 0;
  if (s.bos_id == kNoToken) s.bos_id = 1;
  if (s.eos_id == kNoToken) s.eos_id = 2;
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    const TokenId id = static_cast<TokenId>(i);
    if (id == s.unk_id) {
      s.tokens[i] = "<unk>";
      s.token_types[i] = TokenType::kUnknown;
    } else if (id == s.bos_id) {
      s.tokens[i] = "<s>";
      s.token_types[i] = TokenType::kControl;
    } else if (id == s.eos_id) {
      s.tokens[i] = "</s>";
      s.token_types[i] = TokenType::kControl;
    } else if (i >= 3 && i < 259) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "<0x%02X>", static_cast<unsigned>(i - 3));
      s.tokens[i] = buf;
      s.token_types[i] = TokenType::kByte;
    } else {
      std::string out;
      for (char ch : v.tokens[i]) {
        if (ch == ' ') {
          out += "\xE2\x96\x81";
        } else {
          out.push_back(ch);
        }
      }
      s.tokens[i] = out;
    }
  }
  return s;
}

const char* GgufTokenizerModel(VocabSpec::Model m) {
  switch (m) {
    case VocabSpec::Model::kSpm: return "llama";
    case VocabSpec::Model::kBpe: return "gpt2";
    case VocabSpec::Model::kWpm: return "bert";
  }
  return "llama";
}

// Reorders rows within each head between NeoX (x[i], x[i + rot/2]) and interleaved
// (x[2i], x[2i+1]) pair order, as convert_hf_to_gguf.py's permute() does for Q/K.
Tensor PermuteHeadRows(const Tensor& t, int64_t num_heads, int64_t head_dim, int64_t rotary_dim,
                       bool to_interleaved) {
  Tensor out = Tensor::Allocate(t.dtype, t.shape);
  const int64_t bytes_per_row = t.num_bytes() / t.shape[0];
  const int64_t half = rotary_dim / 2;
  const char* src = static_cast<const char*>(t.data);
  char* dst = static_cast<char*>(out.mutable_data());
  std::memcpy(dst, src, static_cast<size_t>(t.num_bytes()));
  for (int64_t h = 0; h < num_heads; ++h) {
    const int64_t base = h * head_dim;
    for (int64_t j = 0; j < half; ++j) {
      for (int64_t k = 0; k < 2; ++k) {
        const int64_t interleaved = base + 2 * j + k, neox = base + k * half + j;
        const int64_t to = to_interleaved ? interleaved : neox;
        const int64_t from = to_interleaved ? neox : interleaved;
        std::memcpy(dst + to * bytes_per_row, src + from * bytes_per_row,
                    static_cast<size_t>(bytes_per_row));
      }
    }
  }
  return out;
}

// deepseek2's attention and expert keys, as llama.cpp's converter writes them (MLA mode when
// the file splits attn_kv_b: the latent cache as llama.cpp sees it, one KV head of kv_lora +
// rope keys and kv_lora values, the per-head widths in *_mla).
void SetDeepseek2Keys(const ModelConfig& c, GgufWriter* w) {
  const std::string a = "deepseek2.";
  auto u32 = [](int64_t v) { return GgufValue::U32(static_cast<uint32_t>(v)); };
  const MlaConfig& m = c.mla;
  if (m.split_kv_b) {
    w->Set(a + "attention.head_count_kv", u32(1));
    w->Set(a + "attention.key_length", u32(m.kv_lora_rank + m.qk_rope_head_dim));
    w->Set(a + "attention.value_length", u32(m.kv_lora_rank));
    w->Set(a + "attention.key_length_mla", u32(c.head_dim));
    w->Set(a + "attention.value_length_mla", u32(m.v_head_dim));
  } else {
    w->Set(a + "attention.head_count_kv", u32(c.num_heads));
    w->Set(a + "attention.key_length", u32(c.head_dim));
    w->Set(a + "attention.value_length", u32(m.v_head_dim));
  }
  // Written even when 0: llama.cpp requires it unless the layer count looks like V2-Lite's.
  w->Set(a + "attention.q_lora_rank", u32(m.q_lora_rank));
  w->Set(a + "attention.kv_lora_rank", u32(m.kv_lora_rank));
  if (m.yarn_log_multiplier > 0.0f) {
    w->Set(a + "rope.scaling.yarn_log_multiplier", GgufValue::F32(0.1f * m.yarn_log_multiplier));
  }
  const MoeConfig& e = c.moe;
  w->Set(a + "leading_dense_block_count", u32(e.is_moe_model() ? e.first_dense_layers : c.num_layers));
  if (!e.is_moe_model()) return;
  w->Set(a + "expert_count", u32(e.num_experts));
  w->Set(a + "expert_used_count", u32(e.num_experts_used));
  w->Set(a + "expert_shared_count", u32(e.num_shared_experts));
  w->Set(a + "expert_feed_forward_length", u32(e.expert_ffn_dim));
  w->Set(a + "expert_weights_scale", GgufValue::F32(e.weights_scale));
  w->Set(a + "expert_weights_norm", GgufValue::Bool(e.normalize_weights));
  w->Set(a + "expert_gating_func", u32(e.gating == ExpertGating::kSigmoid ? 2 : 1));
  if (e.num_groups > 1) {
    w->Set(a + "expert_group_count", u32(e.num_groups));
    w->Set(a + "expert_group_used_count", u32(e.num_groups_used));
  }
}

}  // namespace

// llama.cpp's MLA layout from attn_kv_b [heads * (nope + v), kv_lora] (HF kv_b_proj):
// attn_k_b [heads, kv_lora, nope] (W_UK[h] transposed) and attn_v_b [heads, v, kv_lora], element
// for element in the same float dtype (exact). Returns the model unchanged when attn_kv_b is
// quantized (a transposed q8_0 would need requantizing): it is saved in the older layout,
// which llama.cpp also loads.
StatusOr<LoadedModel> SplitKvB(const LoadedModel& model) {
  const ModelConfig& c = model.config;
  LoadedModel out = model;
  const int64_t H = c.num_heads, nope = c.mla.qk_nope_head_dim, v = c.mla.v_head_dim,
                r = c.mla.kv_lora_rank;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    KV_ASSIGN_OR_RETURN(Tensor kv_b, model.Get("blk." + std::to_string(l) + ".attn_kv_b.weight"));
    if (kv_b.dtype != DType::kF32 && kv_b.dtype != DType::kF16 && kv_b.dtype != DType::kBF16) {
      return model;
    }
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const Tensor kv_b = model.tensors.at(p + "attn_kv_b.weight");
    const size_t e = static_cast<size_t>(DTypeBlockBytes(kv_b.dtype));  // bytes per value
    Tensor k_b = Tensor::Allocate(kv_b.dtype, {H, r, nope});
    Tensor v_b = Tensor::Allocate(kv_b.dtype, {H, v, r});
    const char* src = static_cast<const char*>(kv_b.data);
    char* kd = static_cast<char*>(k_b.mutable_data());
    char* vd = static_cast<char*>(v_b.mutable_data());
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < nope; ++i) {
        for (int64_t j = 0; j < r; ++j) {
          std::memcpy(kd + ((h * r + j) * nope + i) * e, src + ((h * (nope + v) + i) * r + j) * e, e);
        }
      }
      std::memcpy(vd + h * v * r * e, src + (h * (nope + v) + nope) * r * e, v * r * e);
    }
    out.tensors.erase(p + "attn_kv_b.weight");
    out.tensors[p + "attn_k_b.weight"] = k_b;
    out.tensors[p + "attn_v_b.weight"] = v_b;
  }
  out.config.mla.split_kv_b = true;
  return out;
}

// `t` with every row converted to `dtype` (through f32), in parallel over rows on `pool`.
Tensor ConvertRows(const Tensor& t, DType dtype, ThreadPool& pool) {
  Tensor out = Tensor::Allocate(dtype, t.shape);
  const int64_t cols = t.cols();
  pool.ParallelFor(t.rows(), std::max<int64_t>(1, 16384 / cols), [&](int64_t b, int64_t e) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = b; r < e; ++r) {
      DequantizeRow(t.dtype, t.row(r), row.data(), cols);
      QuantizeRow(dtype, row.data(), const_cast<void*>(out.row(r)), cols);
    }
  });
  return out;
}

// general.file_type (LLAMA_FTYPE) of a model written as it is: from the type of the bulk of
// its matrices.
uint32_t BulkFileType(const LoadedModel& model) {
  std::map<DType, int64_t> elems;
  for (const auto& [name, t] : model.tensors) {
    if (t.shape.size() >= 2) elems[t.dtype] += t.num_elements();
  }
  DType bulk = DType::kF32;
  int64_t best = -1;
  for (const auto& [d, n] : elems) {
    if (n > best) {
      best = n;
      bulk = d;
    }
  }
  const std::optional<QuantFileType> type = UniformQuantFileType(bulk);
  return LlamaFtype(type.value_or(QuantFileType::kF32));
}

Status SaveGgufModel(const LoadedModel& original, const std::string& path,
                     const SaveGgufOptions& options) {
  KV_RETURN_IF_ERROR(original.config.Validate());
  LoadedModel split;
  if (original.config.is_mla() && !original.config.mla.split_kv_b) {
    KV_ASSIGN_OR_RETURN(split, SplitKvB(original));
  }
  const LoadedModel& model = split.tensors.empty() ? original : split;
  const ModelConfig& c = model.config;
  if (c.architecture != "llama" && c.architecture != "mistral" && c.architecture != "qwen2" &&
      c.architecture != "deepseek2" && c.architecture != "bert") {
    return UnimplementedError("cannot save architecture '" + c.architecture + "' as GGUF");
  }
  if (c.is_mla() && c.rope.layout != RopeLayout::kInterleaved) {
    return UnimplementedError("MLA models are saved with interleaved RoPE pairs only");
  }
  // Mistral is a llama in GGUF (llama.cpp has no separate `mistral` architecture for it).
  const std::string arch = c.architecture == "mistral" ? "llama" : c.architecture;
  const RopeLayout target_layout = GgufRopeLayout(arch);
  const int64_t rot = c.rope.rotary_dim > 0 ? c.rope.rotary_dim : c.head_dim;
  if (c.rope.scaling == RopeScalingType::kLlama3 && arch != "llama") {
    return UnimplementedError("llama3 RoPE scaling can only be saved for llama models");
  }

  GgufWriter w;
  const uint32_t ftype =
      options.file_type ? LlamaFtype(*options.file_type) : BulkFileType(model);
  w.Set("general.architecture", GgufValue::String(arch));
  w.Set("general.name", GgufValue::String(c.name));
  w.Set("general.file_type", GgufValue::U32(ftype));
  w.Set("general.alignment", GgufValue::U32(32));
  auto u32 = [](int64_t v) { return GgufValue::U32(static_cast<uint32_t>(v)); };
  w.Set(arch + ".vocab_size", u32(c.vocab_size));
  w.Set(arch + ".context_length", u32(c.max_seq_len));
  w.Set(arch + ".embedding_length", u32(c.hidden_dim));
  w.Set(arch + ".feed_forward_length", u32(c.ffn_dim));
  w.Set(arch + ".block_count", u32(c.num_layers));
  w.Set(arch + ".attention.head_count", u32(c.num_heads));
  if (c.is_encoder()) {
    // llama.cpp's bert keys: without causal = false it masks causally, without a pooling type
    // it pools nothing, without token types it refuses the file.
    w.Set(arch + ".attention.layer_norm_epsilon", GgufValue::F32(c.norm_eps));
    w.Set(arch + ".attention.causal", GgufValue::Bool(c.causal));
    w.Set(arch + ".pooling_type", u32(static_cast<int64_t>(c.pooling)));
    w.Set("tokenizer.ggml.token_type_count", u32(c.token_type_count));
  } else if (c.is_mla()) {
    SetDeepseek2Keys(c, &w);
  } else {
    w.Set(arch + ".attention.head_count_kv", u32(c.num_kv_heads));
    w.Set(arch + ".attention.key_length", u32(c.head_dim));
    w.Set(arch + ".attention.value_length", u32(c.head_dim));
  }
  if (!c.is_encoder()) {
    w.Set(arch + ".rope.freq_base", GgufValue::F32(c.rope.theta));
    w.Set(arch + ".rope.dimension_count", u32(rot));
    w.Set(arch + ".attention.layer_norm_rms_epsilon", GgufValue::F32(c.norm_eps));
  }
  if (c.rope.scaling == RopeScalingType::kYarn) {
    if (!c.is_mla()) return UnimplementedError("YaRN RoPE scaling is saved for deepseek2 only");
    w.Set(arch + ".rope.scaling.type", GgufValue::String("yarn"));
    w.Set(arch + ".rope.scaling.factor", GgufValue::F32(c.rope.scaling_factor));
    w.Set(arch + ".rope.scaling.original_context_length",
          u32(c.rope.yarn_original_max_positions));
  } else if (c.rope.scaling == RopeScalingType::kLinear) {
    w.Set(arch + ".rope.scaling.type", GgufValue::String("linear"));
    w.Set(arch + ".rope.scaling.factor", GgufValue::F32(c.rope.scaling_factor));
  } else if (c.rope.scaling == RopeScalingType::kLlama3) {
    w.Set(arch + ".rope.scaling.original_context_length",
          u32(c.rope.llama3_original_max_positions));
  }

  if (model.vocab.has_value()) {
    const VocabSpec v = ToGgufVocab(*model.vocab);
    w.Set("tokenizer.ggml.model", GgufValue::String(GgufTokenizerModel(v.model)));
    if (v.model == VocabSpec::Model::kBpe) {
      w.Set("tokenizer.ggml.pre", GgufValue::String(v.pre));
    }
    w.Set("tokenizer.ggml.tokens", GgufValue::StringArray(v.tokens));
    if (v.scores.size() == v.tokens.size()) {
      w.Set("tokenizer.ggml.scores", GgufValue::F32Array(v.scores));
    }
    std::vector<int32_t> types(v.tokens.size(), static_cast<int32_t>(TokenType::kNormal));
    for (size_t i = 0; i < v.token_types.size() && i < types.size(); ++i) {
      types[i] = static_cast<int32_t>(v.token_types[i]);
    }
    w.Set("tokenizer.ggml.token_type", GgufValue::I32Array(types));
    if (!v.merges.empty()) w.Set("tokenizer.ggml.merges", GgufValue::StringArray(v.merges));
    auto set_id = [&](const char* key, TokenId id) {
      if (id != kNoToken) w.Set(key, GgufValue::U32(static_cast<uint32_t>(id)));
    };
    set_id("tokenizer.ggml.bos_token_id", v.bos_id);
    set_id("tokenizer.ggml.eos_token_id", v.eos_id);
    set_id("tokenizer.ggml.unknown_token_id", v.unk_id);
    set_id("tokenizer.ggml.padding_token_id", v.pad_id);
    set_id("tokenizer.ggml.seperator_token_id", v.sep_id);  // llama.cpp's spelling
    set_id("tokenizer.ggml.cls_token_id", v.cls_id);
    set_id("tokenizer.ggml.mask_token_id", v.mask_id);
    w.Set("tokenizer.ggml.add_bos_token", GgufValue::Bool(v.add_bos));
    w.Set("tokenizer.ggml.add_eos_token", GgufValue::Bool(v.add_eos));
    if (v.model == VocabSpec::Model::kWpm) {
      w.Set("tokenizer.ggml.add_sep_token", GgufValue::Bool(true));  // [CLS] text [SEP]
    }
    w.Set("tokenizer.ggml.add_space_prefix", GgufValue::Bool(v.add_space_prefix));
    if (!v.eog_ids.empty()) {
      std::vector<int32_t> eog(v.eog_ids.begin(), v.eog_ids.end());
      w.Set(kEogIdsKey, GgufValue::I32Array(eog));
    }
    if (!v.pre_regexes.empty()) w.Set(kPreRegexesKey, GgufValue::StringArray(v.pre_regexes));
    if (v.bpe_ignore_merges) w.Set(kIgnoreMergesKey, GgufValue::Bool(true));
    if (v.bpe_add_prefix_space) w.Set(kBpePrefixSpaceKey, GgufValue::Bool(true));
  }
  if (!model.chat_template.empty()) {
    w.Set("tokenizer.chat_template", GgufValue::String(model.chat_template));
  }

  // Tensors: llama.cpp names and order; Q/K rows permuted when the layouts differ; each in
  // its type of options.file_type's mix when one is given.
  std::vector<Tensor> keep_alive;
  std::set<std::string> written;
  const QuantMixModel mix_model = QuantMixModelFor(c);
  std::unique_ptr<ThreadPool> pool;
  int64_t convert_total_bytes = 0, convert_done_bytes = 0;
  auto target_dtype = [&](const std::string& name, const Tensor& t) {
    return options.file_type ? QuantMixDType(*options.file_type, mix_model, name, t.shape)
                             : t.dtype;
  };
  if (options.file_type) {
    for (const auto& [name, t] : model.tensors) {
      if (target_dtype(name, t) != t.dtype) convert_total_bytes += t.num_bytes();
    }
  }
  auto add = [&](const std::string& name, const Tensor& t) -> Status {
    written.insert(name);
    const DType dtype = target_dtype(name, t);
    if (dtype == t.dtype) return w.AddTensor(name, t);
    if (t.cols() % DTypeBlockElems(dtype) != 0) {
      return InvalidArgumentError("tensor " + name + ": rows of " + std::to_string(t.cols()) +
                                  " values cannot be stored as " + DTypeName(dtype));
    }
    if (pool == nullptr) {
      pool = std::make_unique<ThreadPool>(
          options.num_threads > 0 ? options.num_threads : ThreadPool::HardwareThreads());
    }
    keep_alive.push_back(ConvertRows(t, dtype, *pool));
    convert_done_bytes += t.num_bytes();
    if (options.progress) options.progress(convert_done_bytes, convert_total_bytes);
    return w.AddTensor(name, keep_alive.back());
  };
  std::vector<std::string> order;
  for (const ExpectedTensor& e : ExpectedModelTensors(c)) order.push_back(e.name);
  std::vector<std::string> front(order.begin(), order.begin() + (c.tied_embeddings ? 2 : 3));
  for (const std::string& n : front) {
    KV_ASSIGN_OR_RETURN(Tensor t, model.Get(n));
    KV_RETURN_IF_ERROR(add(n, t));
  }
  if (c.rope.scaling == RopeScalingType::kLlama3) {
    std::vector<float> factors = Llama3Factors(c.rope, rot);
    Tensor t = Tensor::Allocate(DType::kF32, {static_cast<int64_t>(factors.size())});
    std::memcpy(t.mutable_data(), factors.data(), factors.size() * sizeof(float));
    keep_alive.push_back(t);
    KV_RETURN_IF_ERROR(add("rope_freqs.weight", t));
  }
  const bool permute = c.rope.layout != target_layout;
  for (size_t i = front.size(); i < order.size(); ++i) {
    const std::string& n = order[i];
    KV_ASSIGN_OR_RETURN(Tensor t, model.Get(n));
    const bool is_q = n.find(".attn_q.") != std::string::npos;
    const bool is_k = n.find(".attn_k.") != std::string::npos;
    if (permute && (is_q || is_k)) {
      t = PermuteHeadRows(t, is_q ? c.num_heads : c.num_kv_heads, c.head_dim, rot,
                          target_layout == RopeLayout::kInterleaved);
      keep_alive.push_back(t);
    }
    KV_RETURN_IF_ERROR(add(n, t));
  }
  for (const auto& [n, t] : model.tensors) {
    if (!written.count(n)) KV_RETURN_IF_ERROR(add(n, t));
  }
  return w.Write(path);
}

}  // namespace kvserve

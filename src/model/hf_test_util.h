// Test-only helper (header-only, used by hf_model_test and tests/hf_gguf_equivalence_test):
// writes a tiny Hugging Face model folder with random weights.
#pragma once

#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/safetensors.h"
#include "model/synthetic.h"
#include "tensor/tensor.h"

namespace kvserve::testing {

struct TinyHfOptions {
  std::string architecture = "LlamaForCausalLM";  // or Qwen2ForCausalLM, MistralForCausalLM
  DType dtype = DType::kF32;                       // f32, f16 or bf16 (safetensors)
  bool tied = false;
  int num_shards = 1;                              // 1: model.safetensors; 2: index + shards
  bool llama3_scaling = false;
  uint64_t seed = 1;
  int64_t vocab_size = 300;
  int64_t hidden = 64, ffn = 96, layers = 2, heads = 4, kv_heads = 2;
};

inline float TestRandom(uint64_t* state) {  // uniform in [-1, 1)
  *state += 0x9e3779b97f4a7c15ull;
  uint64_t z = *state;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * 0x1.0p-23f - 1.0f;
}

// HF tensor name -> tensor, in HF order. Norm weights are 1 + noise, others noise * scale.
inline std::vector<std::pair<std::string, Tensor>> MakeTinyHfTensors(const TinyHfOptions& o) {
  std::vector<std::pair<std::string, Tensor>> out;
  uint64_t state = o.seed * 7919;
  const int64_t hd = o.hidden / o.heads;
  auto make = [&](const std::string& name, std::vector<int64_t> shape, bool norm, float scale) {
    Tensor t = Tensor::Allocate(norm ? o.dtype : o.dtype, shape);
    std::vector<float> row(static_cast<size_t>(t.cols()));
    for (int64_t r = 0; r < t.rows(); ++r) {
      for (float& x : row) x = (norm ? 1.0f : 0.0f) + scale * TestRandom(&state);
      QuantizeRow(o.dtype, row.data(), const_cast<void*>(t.row(r)), t.cols());
    }
    out.emplace_back(name, t);
  };
  const bool bias = o.architecture == "Qwen2ForCausalLM";
  make("model.embed_tokens.weight", {o.vocab_size, o.hidden}, false, 0.5f);
  for (int64_t l = 0; l < o.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    make(p + "input_layernorm.weight", {o.hidden}, true, 0.1f);
    make(p + "self_attn.q_proj.weight", {o.heads * hd, o.hidden}, false, 0.15f);
    make(p + "self_attn.k_proj.weight", {o.kv_heads * hd, o.hidden}, false, 0.15f);
    make(p + "self_attn.v_proj.weight", {o.kv_heads * hd, o.hidden}, false, 0.15f);
    if (bias) {
      make(p + "self_attn.q_proj.bias", {o.heads * hd}, false, 0.1f);
      make(p + "self_attn.k_proj.bias", {o.kv_heads * hd}, false, 0.1f);
      make(p + "self_attn.v_proj.bias", {o.kv_heads * hd}, false, 0.1f);
    }
    make(p + "self_attn.o_proj.weight", {o.hidden, o.heads * hd}, false, 0.1f);
    make(p + "post_attention_layernorm.weight", {o.hidden}, true, 0.1f);
    make(p + "mlp.gate_proj.weight", {o.ffn, o.hidden}, false, 0.15f);
    make(p + "mlp.up_proj.weight", {o.ffn, o.hidden}, false, 0.15f);
    make(p + "mlp.down_proj.weight", {o.hidden, o.ffn}, false, 0.1f);
  }
  make("model.norm.weight", {o.hidden}, true, 0.1f);
  if (!o.tied) make("lm_head.weight", {o.vocab_size, o.hidden}, false, 0.3f);
  return out;
}

// tokenizer.json text for a byte-level BPE vocabulary (the synthetic one of vocab_size).
inline std::string TinyTokenizerJson(int64_t vocab_size) {
  VocabSpec v = MakeSyntheticVocab(vocab_size, 3).value();
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i + 1 < v.tokens.size(); ++i) vocab[v.tokens[i]] = i;
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", v.tokens.size() - 1}, {"content", v.tokens.back()}, {"single_word", false},
         {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
        {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", v.merges}}},
  };
  return j.dump();
}

inline void WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// Writes the folder; returns the tensors written (HF names).
inline std::vector<std::pair<std::string, Tensor>> WriteTinyHfModel(const std::string& dir,
                                                                    const TinyHfOptions& o) {
  ::mkdir(dir.c_str(), 0755);
  nlohmann::json cfg = {
      {"architectures", {o.architecture}},
      {"hidden_size", o.hidden},
      {"intermediate_size", o.ffn},
      {"num_hidden_layers", o.layers},
      {"num_attention_heads", o.heads},
      {"num_key_value_heads", o.kv_heads},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", 10000.0},
      {"max_position_embeddings", 256},
      {"tie_word_embeddings", o.tied},
      {"vocab_size", o.vocab_size},
      {"torch_dtype", o.dtype == DType::kBF16 ? "bfloat16" : "float32"},
      {"bos_token_id", o.vocab_size - 1},
      {"eos_token_id", o.vocab_size - 1},
  };
  if (o.llama3_scaling) {
    cfg["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  }
  WriteTextFile(dir + "/config.json", cfg.dump(2));
  WriteTextFile(dir + "/tokenizer.json", TinyTokenizerJson(o.vocab_size));
  WriteTextFile(dir + "/tokenizer_config.json",
                nlohmann::json({{"bos_token", "<|endoftext|>"},
                                {"eos_token", "<|endoftext|>"},
                                {"add_bos_token", false},
                                {"chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}"}})
                    .dump());
  auto tensors = MakeTinyHfTensors(o);
  if (o.num_shards <= 1) {
    (void)WriteSafetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
  } else {
    const size_t half = tensors.size() / 2;
    std::vector<std::pair<std::string, Tensor>> a(tensors.begin(), tensors.begin() + half);
    std::vector<std::pair<std::string, Tensor>> b(tensors.begin() + half, tensors.end());
    const std::string na = "model-00001-of-00002.safetensors";
    const std::string nb = "model-00002-of-00002.safetensors";
    (void)WriteSafetensors(dir + "/" + na, a, {{"format", "pt"}});
    (void)WriteSafetensors(dir + "/" + nb, b, {{"format", "pt"}});
    nlohmann::json map = nlohmann::json::object();
    for (const auto& [n, t] : a) map[n] = na;
    for (const auto& [n, t] : b) map[n] = nb;
    WriteTextFile(dir + "/model.safetensors.index.json",
                  nlohmann::json({{"metadata", {{"total_size", 0}}}, {"weight_map", map}}).dump());
  }
  return tensors;
}

}  // namespace kvserve::testing

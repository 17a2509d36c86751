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

#include "model/model_loader.h"
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

// A Hugging Face BertModel folder as sentence-transformers saves it, from a bert model with
// GGUF names (e.g. a synthetic preset): config.json, model.safetensors under BertModel's own
// names (with `prefix`, e.g. "bert." as BertFor* classes save), vocab.txt (Hugging Face's
// "##" form of the WordPiece vocabulary), modules.json and 1_Pooling/config.json for `pooling`.
struct HfBertOptions {
  PoolingType pooling = PoolingType::kMean;
  std::string prefix;           // "" or "bert."
  bool old_layer_norm_names = false;  // LayerNorm.gamma / .beta
  bool write_modules = true;    // false: no modules.json (the loader then pools by mean)
};

inline std::string HfBertTensorName(const std::string& gguf, const HfBertOptions& o) {
  std::string hf;
  const std::map<std::string, std::string> top = {
      {"token_embd.weight", "embeddings.word_embeddings.weight"},
      {"token_types.weight", "embeddings.token_type_embeddings.weight"},
      {"position_embd.weight", "embeddings.position_embeddings.weight"},
      {"token_embd_norm.weight", "embeddings.LayerNorm.weight"},
      {"token_embd_norm.bias", "embeddings.LayerNorm.bias"}};
  if (auto it = top.find(gguf); it != top.end()) {
    hf = it->second;
  } else {
    const size_t dot = gguf.find('.', 4);
    const std::string layer = gguf.substr(4, dot - 4), part = gguf.substr(dot + 1);
    const std::map<std::string, std::string> parts = {
        {"attn_q", "attention.self.query"},       {"attn_k", "attention.self.key"},
        {"attn_v", "attention.self.value"},       {"attn_output", "attention.output.dense"},
        {"attn_output_norm", "attention.output.LayerNorm"},
        {"ffn_up", "intermediate.dense"},         {"ffn_down", "output.dense"},
        {"layer_output_norm", "output.LayerNorm"}};
    const std::string module = part.substr(0, part.find('.'));
    hf = "encoder.layer." + layer + "." + parts.at(module) + part.substr(part.find('.'));
  }
  if (o.old_layer_norm_names && hf.find("LayerNorm.") != std::string::npos) {
    hf = hf.substr(0, hf.rfind('.') + 1) + (hf.ends_with(".weight") ? "gamma" : "beta");
  }
  return o.prefix + hf;
}

inline void WriteHfBertFolder(const std::string& dir, const LoadedModel& m,
                              const HfBertOptions& o = {}) {
  ::mkdir(dir.c_str(), 0755);
  const ModelConfig& c = m.config;
  WriteTextFile(dir + "/config.json",
                nlohmann::json({{"architectures", {"BertModel"}},
                                {"model_type", "bert"},
                                {"hidden_act", "gelu"},
                                {"hidden_size", c.hidden_dim},
                                {"intermediate_size", c.ffn_dim},
                                {"num_hidden_layers", c.num_layers},
                                {"num_attention_heads", c.num_heads},
                                {"max_position_embeddings", c.max_seq_len},
                                {"layer_norm_eps", c.norm_eps},
                                {"type_vocab_size", c.token_type_count},
                                {"position_embedding_type", "absolute"},
                                {"vocab_size", c.vocab_size}})
                    .dump(2));
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : m.tensors) tensors.emplace_back(HfBertTensorName(name, o), t);
  (void)WriteSafetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
  std::string vocab;
  const std::string u = "\xE2\x96\x81";
  for (const std::string& t : m.vocab->tokens) {
    if (t.starts_with(u)) {
      vocab += t.substr(u.size()) + "\n";
    } else if (t.size() >= 2 && t.front() == '[' && t.back() == ']') {
      vocab += t + "\n";
    } else {
      vocab += "##" + t + "\n";
    }
  }
  WriteTextFile(dir + "/vocab.txt", vocab);
  if (o.write_modules) {
    WriteTextFile(dir + "/modules.json",
                  R"([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                      {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                      {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])");
    ::mkdir((dir + "/1_Pooling").c_str(), 0755);
    WriteTextFile(dir + "/1_Pooling/config.json",
                  nlohmann::json({{"word_embedding_dimension", c.hidden_dim},
                                  {"pooling_mode_cls_token", o.pooling == PoolingType::kCls},
                                  {"pooling_mode_mean_tokens", o.pooling == PoolingType::kMean},
                                  {"pooling_mode_max_tokens", false},
                                  {"pooling_mode_lasttoken", o.pooling == PoolingType::kLast}})
                      .dump());
  }
}

}  // namespace kvserve::testing

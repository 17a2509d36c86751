// LoadHfModel: a Hugging Face model folder (config.json, model.safetensors or a sharded
// model.safetensors.index.json, tokenizer.json, tokenizer_config.json) for LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM and DeepseekV2ForCausalLM / DeepseekV3ForCausalLM; and
// BERT encoders (BertModel: all-MiniLM, bge, e5, gte) as sentence-transformers saves them:
// pooling from modules.json's Pooling module, WordPiece from tokenizer.json or vocab.txt.
// Tensors are renamed to the GGUF names and kept as views of the mapped files (norms and biases
// are copied to f32), except DeepSeek's routed experts: HF stores one tensor per expert, the
// model one [experts, rows, cols] tensor per layer, so those are stacked into memory at load
// (a copy of the experts' bytes; GGUF files are mapped as they are). Llama-family HF
// checkpoints rotate NeoX pairs (rotate_half), so the config says RopeLayout::kNeox and nothing
// is permuted here; DeepSeek's rotate adjacent pairs (its modeling code de-interleaves first).
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "model/model_description.h"
#include "model/model_loader.h"
#include "model/model_tensors.h"
#include "model/safetensors.h"
#include "model/vocab_source.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

using nlohmann::json;

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// GGUF name -> HF BertModel name (sentence-transformers' layout; BertFor* classes add "bert.").
std::string HfBertName(const std::string& gguf) {
  if (gguf == "token_embd.weight") return "embeddings.word_embeddings.weight";
  if (gguf == "token_types.weight") return "embeddings.token_type_embeddings.weight";
  if (gguf == "position_embd.weight") return "embeddings.position_embeddings.weight";
  if (gguf.starts_with("token_embd_norm.")) return "embeddings.LayerNorm." + gguf.substr(16);
  const size_t dot = gguf.find('.', 4);
  const std::string layer = gguf.substr(4, dot - 4);
  const std::string part = gguf.substr(dot + 1);  // "attn_q.weight"
  const size_t pdot = part.find('.');
  const std::string module = part.substr(0, pdot), kind = part.substr(pdot + 1);
  static const std::pair<const char*, const char*> kModules[] = {
      {"attn_q", "attention.self.query"},
      {"attn_k", "attention.self.key"},
      {"attn_v", "attention.self.value"},
      {"attn_output", "attention.output.dense"},
      {"attn_output_norm", "attention.output.LayerNorm"},
      {"ffn_up", "intermediate.dense"},
      {"ffn_down", "output.dense"},
      {"layer_output_norm", "output.LayerNorm"},
  };
  for (const auto& [g, h] : kModules) {
    if (module == g) return "encoder.layer." + layer + "." + h + "." + kind;
  }
  return gguf;
}

// GGUF name -> HF name, for the tensors ExpectedModelTensors lists.
std::string HfName(const std::string& gguf) {
  if (gguf == "token_embd.weight") return "model.embed_tokens.weight";
  if (gguf == "output_norm.weight") return "model.norm.weight";
  if (gguf == "output.weight") return "lm_head.weight";
  // blk.N.<part>
  size_t dot = gguf.find('.', 4);
  std::string layer = gguf.substr(4, dot - 4);
  std::string part = gguf.substr(dot + 1);
  static const std::pair<const char*, const char*> kParts[] = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
      // DeepSeek MLA and MoE.
      {"attn_q_a.weight", "self_attn.q_a_proj.weight"},
      {"attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight"},
      {"attn_q_b.weight", "self_attn.q_b_proj.weight"},
      {"attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight"},
      {"attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight"},
      {"attn_kv_b.weight", "self_attn.kv_b_proj.weight"},
      {"ffn_gate_inp.weight", "mlp.gate.weight"},
      {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias"},
      {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight"},
      {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight"},
      {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight"},
  };
  for (const auto& [g, h] : kParts) {
    if (part == g) return "model.layers." + layer + "." + h;
  }
  return gguf;
}

// A folder whose config.json has a quantization_config (also inside text_config), or whose
// tensor names are those of packed quantised weights (*.qweight, *.qzeros, *.scales,
// *.g_idx, *.weight_scale*, *.SCB), holds pre-quantised weights: refused, saying so.
Status RefusePreQuantized(const std::string& dir, const std::vector<std::string>& names) {
  StatusOr<json> config = ReadJsonFile(dir + "/config.json");
  if (config.ok() && config->is_object()) {
    const json* c = &*config;
    bool quantized = c->contains("quantization_config");
    if (c->contains("text_config") && (*c)["text_config"].is_object()) {
      quantized = quantized || (*c)["text_config"].contains("quantization_config");
    }
    if (quantized) {
      std::string method;
      const json& q = c->contains("quantization_config") ? (*c)["quantization_config"]
                                                          : (*c)["text_config"]["quantization_config"];
      if (q.is_object() && q.contains("quant_method") && q["quant_method"].is_string()) {
        method = " (" + q["quant_method"].get<std::string>() + ")";
      }
      return UnimplementedError("config.json has a quantization_config" + method + ": " +
                                kPreQuantizedHfMessage);
    }
  }
  for (const std::string& n : names) {
    for (const char* suffix : {".qweight", ".qzeros", ".scales", ".g_idx", ".SCB"}) {
      if (n.ends_with(suffix)) {
        return UnimplementedError("tensor '" + n + "' is a packed quantised weight: " +
                                  kPreQuantizedHfMessage);
      }
    }
    if (n.find(".weight_scale") != std::string::npos) {
      return UnimplementedError("tensor '" + n + "' is a quantised weight's scale: " +
                                kPreQuantizedHfMessage);
    }
  }
  return OkStatus();
}

// blk.N.ffn_{gate,up,down}_exps.weight: the layer's model.layers.N.mlp.experts.E.*_proj
// tensors (one per routed expert, all of one dtype and shape) copied into one [E, rows, cols].
StatusOr<Tensor> StackExperts(
    const std::string& gguf, const ModelConfig& c,
    const std::map<std::string, std::shared_ptr<SafetensorsFile>>& by_tensor) {
  const size_t dot = gguf.find('.', 4);
  const std::string layer = gguf.substr(4, dot - 4);
  const std::string part = gguf.substr(dot + 1);
  const std::string proj = part.starts_with("ffn_gate") ? "gate_proj"
                           : part.starts_with("ffn_up") ? "up_proj"
                                                        : "down_proj";
  Tensor out;
  for (int64_t e = 0; e < c.moe.num_experts; ++e) {
    const std::string hf = "model.layers." + layer + ".mlp.experts." + std::to_string(e) + "." +
                           proj + ".weight";
    auto it = by_tensor.find(hf);
    if (it == by_tensor.end()) return NotFoundError("tensor " + hf + " is missing");
    KV_ASSIGN_OR_RETURN(Tensor t, it->second->tensor(hf));
    if (t.shape.size() != 2) return InvalidArgumentError("tensor " + hf + " must be 2-D");
    if (e == 0) {
      out = Tensor::Allocate(t.dtype, {c.moe.num_experts, t.shape[0], t.shape[1]});
    } else if (t.dtype != out.dtype || t.shape[0] != out.shape[1] || t.shape[1] != out.shape[2]) {
      return InvalidArgumentError("tensor " + hf + " differs in dtype or shape from expert 0");
    }
    std::memcpy(static_cast<char*>(out.mutable_data()) + e * t.num_bytes(), t.data,
                static_cast<size_t>(t.num_bytes()));
  }
  return out;
}

// A token's id by its text, or kNoToken.
TokenId FindToken(const VocabSpec& v, const std::string& text) {
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.tokens[i] == text) return static_cast<TokenId>(i);
  }
  return kNoToken;
}

// tokenizer_config.json special tokens are a string or {"content": string}.
std::string SpecialTokenText(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) {
    return j["content"].get<std::string>();
  }
  return "";
}

Status ApplyTokenizerConfig(const json& tc, LoadedModel* model) {
  if (tc.contains("chat_template")) {
    const json& t = tc["chat_template"];
    if (t.is_string()) {
      model->chat_template = t.get<std::string>();
    } else if (t.is_array()) {  // [{"name": "default", "template": ...}, ...]
      for (const json& e : t) {
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
            e["template"].is_string()) {
          model->chat_template = e["template"].get<std::string>();
        }
      }
    }
  }
  if (!model->vocab.has_value()) return OkStatus();
  VocabSpec& v = *model->vocab;
  if (tc.contains("bos_token")) {
    TokenId id = FindToken(v, SpecialTokenText(tc["bos_token"]));
    if (id != kNoToken) v.bos_id = id;
  }
  if (tc.contains("eos_token")) {
    TokenId id = FindToken(v, SpecialTokenText(tc["eos_token"]));
    if (id != kNoToken) v.eos_id = id;
  }
  if (tc.contains("pad_token")) {
    TokenId id = FindToken(v, SpecialTokenText(tc["pad_token"]));
    if (id != kNoToken) v.pad_id = id;
  }
  if (tc.contains("add_bos_token") && tc["add_bos_token"].is_boolean()) {
    v.add_bos = tc["add_bos_token"].get<bool>();
  }
  if (tc.contains("add_eos_token") && tc["add_eos_token"].is_boolean()) {
    v.add_eos = tc["add_eos_token"].get<bool>();
  }
  return OkStatus();
}

// sentence-transformers' pooling: modules.json names a Pooling module whose folder holds a
// config.json with pooling_mode_* flags. A folder without one pools by mean (with a warning).
StatusOr<PoolingType> HfPooling(const std::string& dir) {
  if (!FileExists(dir + "/modules.json")) {
    KV_LOG(WARNING) << "no modules.json (sentence-transformers): mean pooling";
    return PoolingType::kMean;
  }
  StatusOr<json> modules = ReadJsonFile(dir + "/modules.json");
  if (!modules.ok()) return modules.status();
  if (!modules->is_array()) return InvalidArgumentError("modules.json is not an array");
  for (const json& m : *modules) {
    if (!m.is_object() || !m.value("type", std::string()).ends_with("models.Pooling")) continue;
    const std::string path = m.value("path", std::string());
    if (path.empty() || path.find("..") != std::string::npos || path.front() == '/') {
      return InvalidArgumentError("modules.json: the Pooling module's path '" + path +
                                  "' is not a folder inside the model");
    }
    StatusOr<json> pc = ReadJsonFile(dir + "/" + path + "/config.json");
    if (!pc.ok()) return pc.status();
    if (!pc->is_object()) return InvalidArgumentError(path + "/config.json is not an object");
    if (pc->value("pooling_mode_cls_token", false)) return PoolingType::kCls;
    if (pc->value("pooling_mode_mean_tokens", false)) return PoolingType::kMean;
    if (pc->value("pooling_mode_lasttoken", false)) return PoolingType::kLast;
    return UnimplementedError(path + "/config.json: a pooling mode other than cls, mean or "
                              "lasttoken (max, mean_sqrt_len, weightedmean) is not supported");
  }
  KV_LOG(WARNING) << "modules.json has no Pooling module: mean pooling";
  return PoolingType::kMean;
}

// The loader's ModelConfig from a config.json's description: a supported architecture, the
// loader's defaults, and what it cannot run refused or limited.
StatusOr<ModelConfig> LoaderConfig(const ModelDescription& d) {
  const std::string& arch_name =
      d.hf_architecture.empty() ? d.config.architecture : d.hf_architecture;
  ModelConfig c = d.config;
  if (arch_name == "BertModel" || arch_name == "bert") {
    c.architecture = "bert";
    // llama.cpp's bert graph: tanh-approximated GELU, absolute positions.
    if (!d.hidden_act.empty() && d.hidden_act != "gelu" && d.hidden_act != "gelu_new" &&
        d.hidden_act != "gelu_pytorch_tanh") {
      return UnimplementedError("config.json: hidden_act '" + d.hidden_act +
                                "' (supported: gelu, gelu_new, gelu_pytorch_tanh)");
    }
    if (!d.position_embedding_type.empty() && d.position_embedding_type != "absolute") {
      return UnimplementedError("config.json: position_embedding_type '" +
                                d.position_embedding_type + "' (supported: absolute)");
    }
    if (c.max_seq_len == 0) c.max_seq_len = 512;
    return c;
  } else if (arch_name == "LlamaForCausalLM" || arch_name == "llama") {
    c.architecture = "llama";
  } else if (arch_name == "MistralForCausalLM" || arch_name == "mistral") {
    c.architecture = "mistral";
  } else if (arch_name == "Qwen2ForCausalLM" || arch_name == "qwen2") {
    c.architecture = "qwen2";
  } else if ((arch_name == "DeepseekV2ForCausalLM" || arch_name == "deepseek_v2" ||
              arch_name == "DeepseekV3ForCausalLM" || arch_name == "deepseek_v3") &&
             d.is_mla()) {
    c.architecture = "deepseek2";
    if (d.moe_layer_freq > 1) {
      return UnimplementedError("config.json: moe_layer_freq " +
                                std::to_string(d.moe_layer_freq) + " (MoE on every layer after "
                                "first_k_dense_replace is supported)");
    }
    if (c.moe.num_experts > 0 && c.moe.num_shared_experts == 0) {
      return UnimplementedError("config.json: DeepSeek MoE without shared experts");
    }
  } else {
    return UnimplementedError("unsupported Hugging Face architecture '" + arch_name +
                              "' (supported: LlamaForCausalLM, MistralForCausalLM, "
                              "Qwen2ForCausalLM, DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, "
                              "BertModel)");
  }
  if (c.max_seq_len == 0) c.max_seq_len = 2048;  // transformers' default
  c.qkv_bias = c.qkv_bias || c.architecture == "qwen2";
  const int64_t window = d.sliding_window_tokens;
  if (c.architecture == "mistral" && window > 0 && window < c.max_seq_len) {
    KV_LOG(WARNING) << "sliding-window attention is not implemented: limiting the context to "
                    << window << " tokens so results stay exact";
    c.max_seq_len = window;
  }
  const std::string& scaling = d.rope_scaling_type;
  if (!scaling.empty() && scaling != "default" && scaling != "linear" && scaling != "llama3" &&
      !(scaling == "yarn" && d.is_mla())) {
    return UnimplementedError("config.json: unsupported rope_scaling type '" + scaling +
                              "' (supported: linear, llama3)");
  }
  return c;
}

}  // namespace

StatusOr<LoadedModel> LoadHfModel(const std::string& dir, const LoadOptions& options) {
  auto fail = [&](const Status& s) { return s.WithContext("Hugging Face model '" + dir + "'"); };
  if (Status s = RefusePreQuantized(dir, {}); !s.ok()) return fail(s);
  StatusOr<ModelDescription> description = ReadHfConfigFile(dir + "/config.json");
  if (!description.ok()) return fail(description.status());
  StatusOr<ModelConfig> config = LoaderConfig(*description);
  if (!config.ok()) return fail(config.status());

  LoadedModel model;
  model.format = "hf";
  model.path = dir;
  model.config = std::move(*config);
  ModelConfig& c = model.config;
  std::string base = dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  c.name = base.substr(base.find_last_of('/') + 1);

  // Safetensors files: one, or shards named by the index's weight_map.
  std::map<std::string, std::shared_ptr<SafetensorsFile>> files;  // by file name
  std::map<std::string, std::shared_ptr<SafetensorsFile>> by_tensor;
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (FileExists(index_path)) {
    StatusOr<json> index = ReadJsonFile(index_path);
    if (!index.ok()) return fail(index.status());
    if (!index->contains("weight_map") || !(*index)["weight_map"].is_object()) {
      return fail(InvalidArgumentError("model.safetensors.index.json has no weight_map object"));
    }
    std::vector<std::string> names;
    for (auto it = (*index)["weight_map"].begin(); it != (*index)["weight_map"].end(); ++it) {
      names.push_back(it.key());
    }
    if (Status s = RefusePreQuantized(dir, names); !s.ok()) return fail(s);
    for (auto it = (*index)["weight_map"].begin(); it != (*index)["weight_map"].end(); ++it) {
      if (!it.value().is_string()) {
        return fail(InvalidArgumentError("weight_map value for '" + it.key() +
                                         "' is not a file name"));
      }
      std::string shard = it.value().get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." ||
          shard == "..") {
        return fail(InvalidArgumentError("weight_map names an invalid shard file '" + shard + "'"));
      }
      auto f = files.find(shard);
      if (f == files.end()) {
        StatusOr<std::unique_ptr<SafetensorsFile>> opened =
            SafetensorsFile::Open(dir + "/" + shard);
        if (!opened.ok()) return fail(opened.status());
        f = files.emplace(shard, std::shared_ptr<SafetensorsFile>(std::move(*opened))).first;
      }
      by_tensor[it.key()] = f->second;
    }
  } else if (FileExists(dir + "/model.safetensors")) {
    StatusOr<std::unique_ptr<SafetensorsFile>> opened =
        SafetensorsFile::Open(dir + "/model.safetensors");
    if (!opened.ok()) return fail(opened.status());
    std::shared_ptr<SafetensorsFile> f(std::move(*opened));
    std::vector<std::string> names;
    for (const auto& [name, info] : f->tensors()) names.push_back(name);
    if (Status s = RefusePreQuantized(dir, names); !s.ok()) return fail(s);
    for (const auto& [name, info] : f->tensors()) by_tensor[name] = f;
  } else {
    return fail(NotFoundError(
        "no model.safetensors or model.safetensors.index.json (PyTorch .bin checkpoints are "
        "not supported)"));
  }
  const bool encoder = c.is_encoder();
  if (encoder) {
    StatusOr<PoolingType> pooling = HfPooling(dir);
    if (!pooling.ok()) return fail(pooling.status());
    c.pooling = *pooling;
  }
  auto lookup = [&](const std::string& gguf_name) -> StatusOr<Tensor> {
    if (encoder) {
      // BertModel's names; BertFor* checkpoints prefix "bert."; old ones name LayerNorm's
      // weight and bias gamma and beta.
      std::string hf = HfBertName(gguf_name);
      std::vector<std::string> names = {hf, "bert." + hf};
      if (hf.find("LayerNorm.") != std::string::npos) {
        std::string old = hf.substr(0, hf.rfind('.') + 1) + (hf.ends_with(".weight") ? "gamma" : "beta");
        names.push_back(old);
        names.push_back("bert." + old);
      }
      for (const std::string& n : names) {
        if (auto it = by_tensor.find(n); it != by_tensor.end()) return it->second->tensor(n);
      }
      return NotFoundError("tensor " + hf + " is missing");
    }
    if (gguf_name.ends_with("_exps.weight")) return StackExperts(gguf_name, c, by_tensor);
    const std::string hf = HfName(gguf_name);
    auto it = by_tensor.find(hf);
    if (it == by_tensor.end()) return NotFoundError("tensor " + hf + " is missing");
    return it->second->tensor(hf);
  };
  if (!encoder && !c.tied_embeddings && by_tensor.count("lm_head.weight") == 0) {
    KV_LOG(WARNING) << "no lm_head.weight: using the tied token embeddings for the output";
    c.tied_embeddings = true;
  }
  for (const char* unsupported : {"self_attn.o_proj.bias", "mlp.down_proj.bias"}) {
    if (by_tensor.count(std::string("model.layers.0.") + unsupported)) {
      return fail(UnimplementedError(std::string("biases on ") + unsupported +
                                     " are not supported"));
    }
  }
  if (c.vocab_size <= 0 && !encoder) {
    if (auto it = by_tensor.find("model.embed_tokens.weight"); it != by_tensor.end()) {
      const SafetensorsTensorInfo* info = it->second->FindTensor("model.embed_tokens.weight");
      if (info && info->shape.size() == 2) c.vocab_size = info->shape[0];
    }
  }
  Status valid = c.Validate();
  if (!valid.ok()) return fail(valid);
  Status collected = CollectModelTensors(c, lookup, &model.tensors);
  if (!collected.ok()) return fail(collected);

  // Tokenizer.
  if (!options.tokenizer_path.empty()) {
    StatusOr<VocabSpec> v = LoadVocabFromPath(options.tokenizer_path, c.vocab_size);
    if (!v.ok()) return v.status();
    model.vocab = std::move(*v);
  } else if (FileExists(dir + "/tokenizer.json")) {
    StatusOr<VocabSpec> v = LoadHfTokenizerJson(dir + "/tokenizer.json");
    if (!v.ok()) return fail(v.status());
    model.vocab = std::move(*v);
  } else if (encoder && FileExists(dir + "/vocab.txt")) {
    StatusOr<VocabSpec> v = LoadHfWordPieceVocabTxt(dir + "/vocab.txt");
    if (!v.ok()) return fail(v.status());
    model.vocab = std::move(*v);
  }
  if (FileExists(dir + "/tokenizer_config.json")) {
    StatusOr<json> tc = ReadJsonFile(dir + "/tokenizer_config.json");
    if (!tc.ok()) return fail(tc.status());
    if (tc->is_object()) KV_RETURN_IF_ERROR(ApplyTokenizerConfig(*tc, &model));
  }
  if (model.vocab.has_value() && FileExists(dir + "/generation_config.json")) {
    StatusOr<json> gc = ReadJsonFile(dir + "/generation_config.json");
    if (gc.ok() && gc->is_object() && gc->contains("eos_token_id")) {
      const json& e = (*gc)["eos_token_id"];
      std::vector<int64_t> ids;
      if (e.is_number_integer()) ids.push_back(e.get<int64_t>());
      if (e.is_array()) {
        for (const json& x : e) {
          if (x.is_number_integer()) ids.push_back(x.get<int64_t>());
        }
      }
      VocabSpec& v = *model.vocab;
      for (int64_t id : ids) {
        if (id < 0 || id >= static_cast<int64_t>(v.tokens.size())) continue;
        TokenId t = static_cast<TokenId>(id);
        if (v.eos_id == kNoToken) v.eos_id = t;
        if (t != v.eos_id && std::find(v.eog_ids.begin(), v.eog_ids.end(), t) == v.eog_ids.end()) {
          v.eog_ids.push_back(t);
        }
      }
    }
  }
  if (model.vocab.has_value() &&
      static_cast<int64_t>(model.vocab->tokens.size()) > c.vocab_size) {
    return fail(InvalidArgumentError("the tokenizer has " +
                                     std::to_string(model.vocab->tokens.size()) +
                                     " tokens but the model only " +
                                     std::to_string(c.vocab_size) + " embedding rows"));
  }
  if (options.progress) options.progress(model.WeightBytes(), model.WeightBytes());
  return model;
}

}  // namespace kvserve

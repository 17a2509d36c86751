#include "model/model_tensors.h"

#include "tensor/dtype.h"

namespace kvserve {

StatusOr<Tensor> VectorToF32(const Tensor& t, const std::string& name) {
  if (t.dtype == DType::kF32) return t;
  if (t.dtype != DType::kF16 && t.dtype != DType::kBF16) {
    return InvalidArgumentError("tensor " + name + " has dtype " + DTypeName(t.dtype) +
                                "; norms and biases must be f32, f16 or bf16");
  }
  Tensor out = Tensor::Allocate(DType::kF32, t.shape);
  DequantizeRow(t.dtype, t.data, static_cast<float*>(out.mutable_data()), t.num_elements());
  return out;
}

StatusOr<const Tensor*> FindShapedTensor(const LoadedModel& model, const std::string& name,
                                         const std::vector<int64_t>& shape) {
  auto it = model.tensors.find(name);
  if (it == model.tensors.end()) return NotFoundError("model is missing tensor '" + name + "'");
  if (it->second.shape != shape) {
    Tensor want;
    want.shape = shape;
    return InvalidArgumentError("tensor '" + name + "' has shape " + it->second.ShapeString() +
                                ", expected " + want.ShapeString());
  }
  const DType dtype = it->second.dtype;
  if (shape.back() % DTypeBlockElems(dtype) != 0) {
    return InvalidArgumentError("tensor '" + name + "': " + DTypeName(dtype) + " rows of " +
                                std::to_string(shape.back()) + " values are not whole " +
                                std::to_string(DTypeBlockElems(dtype)) + "-value blocks");
  }
  return &it->second;
}

namespace {

// f32, f16, bf16 and the GGML block types (q8_0, q4_0 ... q6_k).
bool IsWeightDType(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || IsGgmlBlockType(d);
}

}  // namespace

namespace {

void AddMlaTensors(const ModelConfig& c, const std::string& p, std::vector<ExpectedTensor>* out) {
  const MlaConfig& m = c.mla;
  const int64_t h = c.hidden_dim, q_dim = c.num_heads * c.head_dim;
  if (m.q_lora_rank > 0) {
    out->push_back({p + "attn_q_a_norm.weight", {m.q_lora_rank}, true});
    out->push_back({p + "attn_q_a.weight", {m.q_lora_rank, h}, false});
    out->push_back({p + "attn_q_b.weight", {q_dim, m.q_lora_rank}, false});
  } else {
    out->push_back({p + "attn_q.weight", {q_dim, h}, false});
  }
  out->push_back({p + "attn_kv_a_norm.weight", {m.kv_lora_rank}, true});
  out->push_back({p + "attn_kv_a_mqa.weight", {m.kv_lora_rank + m.qk_rope_head_dim, h}, false});
  if (m.split_kv_b) {
    out->push_back({p + "attn_k_b.weight", {c.num_heads, m.kv_lora_rank, m.qk_nope_head_dim},
                    false});
    out->push_back({p + "attn_v_b.weight", {c.num_heads, m.v_head_dim, m.kv_lora_rank}, false});
  } else {
    out->push_back({p + "attn_kv_b.weight",
                    {c.num_heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank},
                    false});
  }
}

void AddMoeTensors(const ModelConfig& c, const std::string& p, std::vector<ExpectedTensor>* out) {
  const MoeConfig& m = c.moe;
  const int64_t h = c.hidden_dim, E = m.num_experts, F = m.expert_ffn_dim;
  out->push_back({p + "ffn_gate_inp.weight", {E, h}, false});
  if (m.selection_bias) out->push_back({p + "exp_probs_b.bias", {E}, true});
  out->push_back({p + "ffn_gate_exps.weight", {E, F, h}, false});
  out->push_back({p + "ffn_down_exps.weight", {E, h, F}, false});
  out->push_back({p + "ffn_up_exps.weight", {E, F, h}, false});
  if (m.num_shared_experts > 0) {
    const int64_t S = m.num_shared_experts * F;
    out->push_back({p + "ffn_gate_shexp.weight", {S, h}, false});
    out->push_back({p + "ffn_down_shexp.weight", {h, S}, false});
    out->push_back({p + "ffn_up_shexp.weight", {S, h}, false});
  }
}

}  // namespace

namespace {

// BERT (llama.cpp's `bert`): embeddings, their LayerNorm, and per layer Q/K/V/O with biases,
// attn_output_norm, ffn_up/down with biases, layer_output_norm. No output head.
std::vector<ExpectedTensor> ExpectedBertTensors(const ModelConfig& c) {
  const int64_t D = c.hidden_dim, F = c.ffn_dim;
  std::vector<ExpectedTensor> out;
  out.push_back({"token_embd.weight", {c.vocab_size, D}, false});
  out.push_back({"token_types.weight", {c.token_type_count, D}, false, true});
  out.push_back({"position_embd.weight", {c.max_seq_len, D}, false, true});
  out.push_back({"token_embd_norm.weight", {D}, true});
  out.push_back({"token_embd_norm.bias", {D}, true});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    for (const char* m : {"attn_q", "attn_k", "attn_v"}) {
      out.push_back({p + m + ".weight", {D, D}, false});
      out.push_back({p + m + ".bias", {D}, true});
    }
    out.push_back({p + "attn_output.weight", {D, D}, false});
    out.push_back({p + "attn_output.bias", {D}, true});
    out.push_back({p + "attn_output_norm.weight", {D}, true});
    out.push_back({p + "attn_output_norm.bias", {D}, true});
    out.push_back({p + "ffn_up.weight", {F, D}, false});
    out.push_back({p + "ffn_up.bias", {F}, true});
    out.push_back({p + "ffn_down.weight", {D, F}, false});
    out.push_back({p + "ffn_down.bias", {D}, true});
    out.push_back({p + "layer_output_norm.weight", {D}, true});
    out.push_back({p + "layer_output_norm.bias", {D}, true});
  }
  return out;
}

}  // namespace

std::vector<ExpectedTensor> ExpectedModelTensors(const ModelConfig& c) {
  if (c.is_encoder()) return ExpectedBertTensors(c);
  const int64_t h = c.hidden_dim, q_dim = c.num_heads * c.head_dim,
                kv_dim = c.num_kv_heads * c.head_dim;
  const int64_t attn_out = c.is_mla() ? c.num_heads * c.mla.v_head_dim : q_dim;
  std::vector<ExpectedTensor> out;
  out.push_back({"token_embd.weight", {c.vocab_size, h}, false});
  out.push_back({"output_norm.weight", {h}, true});
  if (!c.tied_embeddings) out.push_back({"output.weight", {c.vocab_size, h}, false});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    out.push_back({p + "attn_norm.weight", {h}, true});
    if (c.is_mla()) {
      AddMlaTensors(c, p, &out);
    } else {
      out.push_back({p + "attn_q.weight", {q_dim, h}, false});
      out.push_back({p + "attn_k.weight", {kv_dim, h}, false});
      out.push_back({p + "attn_v.weight", {kv_dim, h}, false});
    }
    if (c.qkv_bias) {
      out.push_back({p + "attn_q.bias", {q_dim}, true});
      out.push_back({p + "attn_k.bias", {kv_dim}, true});
      out.push_back({p + "attn_v.bias", {kv_dim}, true});
    }
    out.push_back({p + "attn_output.weight", {h, attn_out}, false});
    out.push_back({p + "ffn_norm.weight", {h}, true});
    if (c.moe.IsMoeLayer(l)) {
      AddMoeTensors(c, p, &out);
    } else {
      out.push_back({p + "ffn_gate.weight", {c.ffn_dim, h}, false});
      out.push_back({p + "ffn_up.weight", {c.ffn_dim, h}, false});
      out.push_back({p + "ffn_down.weight", {h, c.ffn_dim}, false});
    }
  }
  return out;
}

Status CollectModelTensors(const ModelConfig& config,
                           const std::function<StatusOr<Tensor>(const std::string&)>& lookup,
                           std::map<std::string, Tensor>* out) {
  for (const ExpectedTensor& e : ExpectedModelTensors(config)) {
    KV_ASSIGN_OR_RETURN(Tensor t, lookup(e.name));
    if (t.shape != e.shape) {
      Tensor want;
      want.shape = e.shape;
      return InvalidArgumentError("tensor " + e.name + " has shape " + t.ShapeString() +
                                  ", expected " + want.ShapeString());
    }
    if (!IsWeightDType(t.dtype)) {
      return InvalidArgumentError("tensor " + e.name + " has unsupported dtype " +
                                  DTypeName(t.dtype));
    }
    if (e.vector) {
      KV_ASSIGN_OR_RETURN(t, VectorToF32(t, e.name));
    }
    (*out)[e.name] = std::move(t);
  }
  return OkStatus();
}

namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace


StatusOr<const Tensor*> FindModelTensor(const LoadedModel& model, const std::string& name,
                             const std::vector<int64_t>& shape, bool matrix) {
  auto it = model.tensors.find(name);
  if (it == model.tensors.end()) {
    return NotFoundError("model is missing tensor '" + name + "' (expected shape " +
                         ShapeText(shape) + ")");
  }
  const Tensor& t = it->second;
  if (t.shape != shape) {
    return InvalidArgumentError("tensor '" + name + "' has shape " + ShapeText(t.shape) +
                                " but the config implies " + ShapeText(shape));
  }
  bool dtype_ok = IsFloatDType(t.dtype) || (matrix && IsGgmlBlockType(t.dtype) &&
                                            t.cols() % DTypeBlockElems(t.dtype) == 0);
  if (!dtype_ok) {
    return InvalidArgumentError("tensor '" + name + "' has unsupported type " +
                                std::string(DTypeName(t.dtype)) +
                                (matrix ? " for a weight matrix" : " for a vector"));
  }
  if (t.data == nullptr) return InvalidArgumentError("tensor '" + name + "' has no data");
  return &t;
}

StatusOr<std::vector<float>> FindModelVector(const LoadedModel& model, const std::string& name,
                                        int64_t size) {
  KV_ASSIGN_OR_RETURN(const Tensor* t, FindModelTensor(model, name, {size}, /*matrix=*/false));
  std::vector<float> out(static_cast<size_t>(size));
  DequantizeRow(t->dtype, t->data, out.data(), size);
  return out;
}

}  // namespace kvserve

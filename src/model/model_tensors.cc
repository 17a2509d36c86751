#include "model/model_tensors.h"

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

namespace {

bool IsWeightDType(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kQ8_0;
}

}  // namespace

std::vector<ExpectedTensor> ExpectedModelTensors(const ModelConfig& c) {
  const int64_t h = c.hidden_dim, q_dim = c.num_heads * c.head_dim,
                kv_dim = c.num_kv_heads * c.head_dim;
  std::vector<ExpectedTensor> out;
  out.push_back({"token_embd.weight", {c.vocab_size, h}, false});
  out.push_back({"output_norm.weight", {h}, true});
  if (!c.tied_embeddings) out.push_back({"output.weight", {c.vocab_size, h}, false});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    out.push_back({p + "attn_norm.weight", {h}, true});
    out.push_back({p + "attn_q.weight", {q_dim, h}, false});
    out.push_back({p + "attn_k.weight", {kv_dim, h}, false});
    out.push_back({p + "attn_v.weight", {kv_dim, h}, false});
    if (c.qkv_bias) {
      out.push_back({p + "attn_q.bias", {q_dim}, true});
      out.push_back({p + "attn_k.bias", {kv_dim}, true});
      out.push_back({p + "attn_v.bias", {kv_dim}, true});
    }
    out.push_back({p + "attn_output.weight", {h, q_dim}, false});
    out.push_back({p + "ffn_norm.weight", {h}, true});
    out.push_back({p + "ffn_gate.weight", {c.ffn_dim, h}, false});
    out.push_back({p + "ffn_up.weight", {c.ffn_dim, h}, false});
    out.push_back({p + "ffn_down.weight", {h, c.ffn_dim}, false});
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

}  // namespace kvserve

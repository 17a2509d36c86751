// Mixture-of-experts feed-forward layers (DeepSeek V2/V3): a router picks the top-k routed
// experts per token (softmax or sigmoid gating, optional selection bias and group-limited
// routing), each a SwiGLU of expert_ffn_dim; always-on shared experts are one SwiGLU of
// num_shared_experts * expert_ffn_dim. Batched per expert: a step's tokens are grouped by the
// expert they chose, and each chosen expert's weights are read once per step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/model_config.h"
#include "model/model_loader.h"
#include "tensor/tensor.h"

namespace kvserve {

// The top-k routing of one token: the experts chosen and their weights (after normalization
// and the routed scaling factor), in decreasing order of selection score (ties: lower id).
struct ExpertChoice {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

// Routes one token from its router logits ([num_experts]); `bias` is the selection bias
// ([num_experts]) or empty. The one definition of the routing rule (the model and its tests
// use it).
ExpertChoice RouteToken(const MoeConfig& moe, const float* logits, const std::vector<float>& bias);

// One MoE layer's weights: views into the loaded tensors (owned by the LoadedModel) plus the
// per-expert 2-D slices of the 3-D expert tensors (views sharing their owner, in the file's
// layout: packing them would hold a second copy of every expert). Load packs the router and the
// shared experts, which see every row. Immutable after Load; Forward is not thread-safe.
class MoeLayer {
 public:
  // blk.N.ffn_gate_inp.weight [E, D], blk.N.exp_probs_b.bias [E] (when selection_bias),
  // blk.N.ffn_{gate,up}_exps.weight [E, F, D], ffn_down_exps.weight [E, D, F], and the shared
  // expert blk.N.ffn_{gate,up}_shexp.weight [S*F, D], ffn_down_shexp.weight [D, S*F].
  Status Load(const ModelConfig& config, LoadedModel& model, int64_t layer,
              int64_t* packed_bytes);

  // out[n, D] = the layer's FFN of x[n, D] (x already normed). out is overwritten.
  void Forward(const float* x, int64_t n, float* out, ThreadPool* pool);

 private:
  MoeConfig moe_;
  int64_t hidden_dim_ = 0;
  const Tensor* router_ = nullptr;
  std::vector<float> bias_;  // [E] or empty
  std::vector<Tensor> gate_, up_, down_;  // per expert
  const Tensor* shared_gate_ = nullptr;
  const Tensor* shared_up_ = nullptr;
  const Tensor* shared_down_ = nullptr;
  // Scratch.
  std::vector<float> logits_, rows_, gate_out_, up_out_, expert_out_;
  std::vector<std::vector<std::pair<int64_t, float>>> routed_;  // per expert: (token, weight)
};

}  // namespace kvserve

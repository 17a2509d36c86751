#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/check.h"
#include "kernels/kernels.h"
#include "model/model_tensors.h"

namespace kvserve {
namespace {

// Row-major [n, cols] x -> rows of `order` (a subset of tokens) into dst [m, cols].
void GatherRows(const float* x, int64_t cols, const std::vector<std::pair<int64_t, float>>& order,
                float* dst) {
  for (size_t i = 0; i < order.size(); ++i) {
    std::copy(x + order[i].first * cols, x + (order[i].first + 1) * cols,
              dst + static_cast<int64_t>(i) * cols);
  }
}


// The 2-D slices of a 3-D expert tensor [E, rows, cols], views of the file's layout. Not packed
// for the batched matmul (as dense weights are): that would hold a second copy of every expert,
// 16 GB more for DeepSeek-V2-Lite in q8_0, for the few rows an expert gets per step.
std::vector<Tensor> ExpertSlices(const Tensor& t) {
  std::vector<Tensor> out;
  const int64_t num = t.shape[0], rows = t.shape[1], cols = t.shape[2];
  const int64_t slice_bytes = rows * DTypeRowBytes(t.dtype, cols);
  for (int64_t e = 0; e < num; ++e) {
    Tensor s;
    s.dtype = t.dtype;
    s.shape = {rows, cols};
    s.data = static_cast<const char*>(t.data) + e * slice_bytes;
    s.owner = t.owner;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

ExpertChoice RouteToken(const MoeConfig& moe, const float* logits,
                        const std::vector<float>& bias) {
  const int64_t E = moe.num_experts;
  std::vector<float> probs(static_cast<size_t>(E));
  if (moe.gating == ExpertGating::kSoftmax) {
    const float max = *std::max_element(logits, logits + E);
    double sum = 0.0;
    for (int64_t e = 0; e < E; ++e) sum += probs[e] = std::exp(logits[e] - max);
    for (float& p : probs) p = static_cast<float>(p / sum);
  } else {
    for (int64_t e = 0; e < E; ++e) probs[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  }
  std::vector<float> select = probs;
  if (!bias.empty()) {
    for (int64_t e = 0; e < E; ++e) select[e] += bias[static_cast<size_t>(e)];
  }
  // A NaN score (a malformed file's weights) must not reach the sorts' comparisons.
  for (float& x : select) {
    if (std::isnan(x)) x = -std::numeric_limits<float>::infinity();
  }
  if (moe.num_groups > 1) {  // only the best groups' experts stay eligible
    const int64_t per_group = E / moe.num_groups;
    std::vector<std::pair<float, int64_t>> group_scores;
    for (int64_t g = 0; g < moe.num_groups; ++g) {
      std::vector<float> s(select.begin() + g * per_group, select.begin() + (g + 1) * per_group);
      std::partial_sort(s.begin(), s.begin() + std::min<int64_t>(2, per_group), s.end(),
                        std::greater<float>());
      group_scores.push_back({per_group >= 2 ? s[0] + s[1] : s[0], g});
    }
    std::stable_sort(group_scores.begin(), group_scores.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    for (int64_t i = moe.num_groups_used; i < moe.num_groups; ++i) {
      const int64_t g = group_scores[static_cast<size_t>(i)].second;
      for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e) {
        select[e] = -std::numeric_limits<float>::infinity();
      }
    }
  }
  std::vector<int32_t> ids(static_cast<size_t>(E));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + moe.num_experts_used, ids.end(),
                    [&](int32_t a, int32_t b) {
                      return select[a] > select[b] || (select[a] == select[b] && a < b);
                    });
  ExpertChoice choice;
  choice.experts.assign(ids.begin(), ids.begin() + moe.num_experts_used);
  double sum = 0.0;
  for (int32_t e : choice.experts) {
    choice.weights.push_back(probs[e]);
    sum += probs[e];
  }
  for (float& w : choice.weights) {
    // llama.cpp's floor on the sum keeps all-zero sigmoid weights finite.
    if (moe.normalize_weights) w = static_cast<float>(w / std::max(sum, 6.1035e-5));
    w *= moe.weights_scale;
  }
  return choice;
}

Status MoeLayer::Load(const ModelConfig& c, LoadedModel& model, int64_t layer,
                      int64_t* packed_bytes) {
  moe_ = c.moe;
  hidden_dim_ = c.hidden_dim;
  const int64_t D = c.hidden_dim, E = moe_.num_experts, F = moe_.expert_ffn_dim;
  const std::string p = "blk." + std::to_string(layer) + ".";
  KV_ASSIGN_OR_RETURN(router_, FindShapedTensor(model, p + "ffn_gate_inp.weight", {E, D}));
  if (moe_.selection_bias) {
    KV_ASSIGN_OR_RETURN(const Tensor* b, FindShapedTensor(model, p + "exp_probs_b.bias", {E}));
    bias_.resize(static_cast<size_t>(E));
    DequantizeRow(b->dtype, b->data, bias_.data(), E);
  }
  KV_ASSIGN_OR_RETURN(const Tensor* gate, FindShapedTensor(model, p + "ffn_gate_exps.weight", {E, F, D}));
  KV_ASSIGN_OR_RETURN(const Tensor* up, FindShapedTensor(model, p + "ffn_up_exps.weight", {E, F, D}));
  KV_ASSIGN_OR_RETURN(const Tensor* down, FindShapedTensor(model, p + "ffn_down_exps.weight", {E, D, F}));
  for (const Tensor* t : {gate, up, down}) {
    if (t->shape[2] % DTypeBlockElems(t->dtype) != 0) {
      return InvalidArgumentError(std::string("expert tensor rows must be whole ") +
                                  DTypeName(t->dtype) + " blocks");
    }
  }
  gate_ = ExpertSlices(*gate);
  up_ = ExpertSlices(*up);
  down_ = ExpertSlices(*down);
  std::vector<std::string> every_row = {"ffn_gate_inp.weight"};
  if (moe_.num_shared_experts > 0) {
    const int64_t S = moe_.num_shared_experts * F;
    KV_ASSIGN_OR_RETURN(shared_gate_, FindShapedTensor(model, p + "ffn_gate_shexp.weight", {S, D}));
    KV_ASSIGN_OR_RETURN(shared_up_, FindShapedTensor(model, p + "ffn_up_shexp.weight", {S, D}));
    KV_ASSIGN_OR_RETURN(shared_down_, FindShapedTensor(model, p + "ffn_down_shexp.weight", {D, S}));
    every_row.insert(every_row.end(),
                     {"ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight"});
  }
  // The router and the shared experts see every row of a step: packed like dense weights.
  for (const std::string& name : every_row) {
    Tensor& t = model.tensors.at(p + name);
    t.packed = kernels::PackMatmulWeights(t);
    if (t.packed != nullptr) *packed_bytes += kernels::PackedMatmulWeightsBytes(t);
  }
  routed_.assign(static_cast<size_t>(E), {});
  return OkStatus();
}

void MoeLayer::Forward(const float* x, int64_t n, float* out, ThreadPool* pool) {
  const int64_t D = hidden_dim_, E = moe_.num_experts, F = moe_.expert_ffn_dim;
  logits_.resize(static_cast<size_t>(n * E));
  kernels::Matmul(x, n, *router_, logits_.data(), pool);
  for (auto& r : routed_) r.clear();
  for (int64_t t = 0; t < n; ++t) {
    const ExpertChoice choice = RouteToken(moe_, logits_.data() + t * E, bias_);
    for (size_t i = 0; i < choice.experts.size(); ++i) {
      routed_[static_cast<size_t>(choice.experts[i])].push_back({t, choice.weights[i]});
    }
  }
  // Shared experts first: they write every row of out.
  if (shared_gate_ != nullptr) {
    const int64_t S = shared_gate_->shape[0];
    gate_out_.resize(static_cast<size_t>(n * S));
    up_out_.resize(static_cast<size_t>(n * S));
    kernels::Matmul(x, n, *shared_gate_, gate_out_.data(), pool);
    kernels::Matmul(x, n, *shared_up_, up_out_.data(), pool);
    kernels::SwiGlu(gate_out_.data(), up_out_.data(), n * S, gate_out_.data());
    kernels::Matmul(gate_out_.data(), n, *shared_down_, out, pool);
  } else {
    std::fill(out, out + n * D, 0.0f);
  }
  // Routed experts: each chosen expert once, over the rows that chose it.
  for (int64_t e = 0; e < E; ++e) {
    const auto& order = routed_[static_cast<size_t>(e)];
    if (order.empty()) continue;
    const int64_t m = static_cast<int64_t>(order.size());
    rows_.resize(static_cast<size_t>(m * D));
    gate_out_.resize(static_cast<size_t>(m * F));
    up_out_.resize(static_cast<size_t>(m * F));
    expert_out_.resize(static_cast<size_t>(m * D));
    GatherRows(x, D, order, rows_.data());
    kernels::Matmul(rows_.data(), m, gate_[e], gate_out_.data(), pool);
    kernels::Matmul(rows_.data(), m, up_[e], up_out_.data(), pool);
    kernels::SwiGlu(gate_out_.data(), up_out_.data(), m * F, gate_out_.data());
    kernels::Matmul(gate_out_.data(), m, down_[e], expert_out_.data(), pool);
    for (int64_t i = 0; i < m; ++i) {
      const float w = order[static_cast<size_t>(i)].second;
      float* o = out + order[static_cast<size_t>(i)].first * D;
      const float* y = expert_out_.data() + i * D;
      for (int64_t d = 0; d < D; ++d) o[d] += w * y[d];
    }
  }
}

}  // namespace kvserve

#include "kv/token_eviction.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/check.h"
#include "base/str_format.h"

namespace kvserve {
namespace {

constexpr const char* kMethodList = "none, streaming, h2o, snapkv, pyramidkv";

bool UsesSnapKvScores(KvEvictionMethod method) {
  return method == KvEvictionMethod::kSnapKv || method == KvEvictionMethod::kPyramidKv;
}

void CheckShape(const KvEvictionShape& shape) {
  KV_CHECK(shape.num_layers > 0) << "num_layers=" << shape.num_layers;
  KV_CHECK(shape.num_kv_heads > 0 && shape.num_q_heads > 0 &&
           shape.num_q_heads % shape.num_kv_heads == 0)
      << "num_q_heads=" << shape.num_q_heads << " num_kv_heads=" << shape.num_kv_heads;
  KV_CHECK_GE(shape.num_tokens, 0);
}

void CheckPolicy(const KvEvictionPolicy& policy, KvEvictionMethod method) {
  KV_CHECK(policy.method == method) << "policy is " << KvEvictionMethodName(policy.method)
                                    << ", expected " << KvEvictionMethodName(method);
  const Status status = policy.Validate();
  KV_CHECK(status.ok()) << status.ToString();
}

KvKeptTokens EmptyResult(const KvEvictionShape& shape) {
  KvKeptTokens kept;
  kept.num_layers = shape.num_layers;
  kept.num_kv_heads = shape.num_kv_heads;
  kept.positions.resize(shape.num_layers * shape.num_kv_heads);
  return kept;
}

std::vector<int64_t> AllPositions(int64_t num_tokens) {
  std::vector<int64_t> all(num_tokens);
  std::iota(all.begin(), all.end(), int64_t{0});
  return all;
}

KvKeptTokens KeepAll(const KvEvictionShape& shape) {
  KvKeptTokens kept = EmptyResult(shape);
  const std::vector<int64_t> all = AllPositions(shape.num_tokens);
  for (auto& p : kept.positions) p = all;
  return kept;
}

// The kept positions of one (layer, KV head): [0, num_sink) and [num_tokens - num_recent,
// num_tokens) always, plus the num_selected highest-scoring positions among the rest
// (score descending, then position ascending). scores[t] is the score of position
// t + scores_offset for t in [0, scores.size()); positions outside the scored range and outside
// the protected ranges are never selected. Requires the protected ranges not to overlap and
// enough candidates.
std::vector<int64_t> SelectOneHead(int64_t num_tokens, int64_t num_sink, int64_t num_recent,
                                   int64_t num_selected, std::span<const float> scores,
                                   int64_t scores_offset = 0) {
  KV_CHECK_LE(num_sink + num_recent, num_tokens);
  const int64_t recent_begin = num_tokens - num_recent;
  std::vector<int64_t> candidates;
  const int64_t scored_end = scores_offset + static_cast<int64_t>(scores.size());
  for (int64_t pos = std::max(num_sink, scores_offset); pos < std::min(recent_begin, scored_end);
       ++pos) {
    KV_CHECK(std::isfinite(scores[pos - scores_offset]))
        << "score of position " << pos << " is " << scores[pos - scores_offset];
    candidates.push_back(pos);
  }
  KV_CHECK_LE(num_selected, static_cast<int64_t>(candidates.size()));
  auto better = [&](int64_t a, int64_t b) {
    const float sa = scores[a - scores_offset];
    const float sb = scores[b - scores_offset];
    return sa != sb ? sa > sb : a < b;
  };
  std::nth_element(candidates.begin(), candidates.begin() + num_selected, candidates.end(),
                   better);
  candidates.resize(num_selected);
  std::sort(candidates.begin(), candidates.end());

  std::vector<int64_t> kept;
  kept.reserve(num_sink + num_selected + num_recent);
  for (int64_t pos = 0; pos < num_sink; ++pos) kept.push_back(pos);
  kept.insert(kept.end(), candidates.begin(), candidates.end());
  for (int64_t pos = recent_begin; pos < num_tokens; ++pos) kept.push_back(pos);
  return kept;
}

// SnapKV's selection for one layer with `budget_tokens` kept per KV head.
// window_weights: this layer's [num_q_heads, observation_window, num_tokens].
void SelectSnapKvLayer(const KvEvictionPolicy& policy, const KvEvictionShape& shape,
                       int64_t layer, int64_t budget_tokens,
                       std::span<const float> window_weights, KvKeptTokens& kept) {
  const int64_t n = shape.num_tokens;
  if (n <= budget_tokens) {
    const std::vector<int64_t> all = AllPositions(n);
    for (int64_t g = 0; g < shape.num_kv_heads; ++g) {
      kept.positions[layer * shape.num_kv_heads + g] = all;
    }
    return;
  }
  const int64_t num_sink = policy.sink_tokens;
  const int64_t num_recent = policy.recent_tokens();
  const int64_t num_prefix = n - policy.observation_window;
  const std::vector<float> votes =
      SnapKvVotes(window_weights, shape.num_q_heads, shape.num_kv_heads,
                  policy.observation_window, n, num_prefix, policy.pooling_kernel);
  for (int64_t g = 0; g < shape.num_kv_heads; ++g) {
    std::span<const float> head_votes(votes.data() + g * num_prefix, num_prefix);
    kept.positions[layer * shape.num_kv_heads + g] =
        SelectOneHead(n, num_sink, num_recent, budget_tokens - num_sink - num_recent, head_votes);
  }
}

KvKeptTokens SelectSnapKvWithBudgets(const KvEvictionPolicy& policy, const KvEvictionShape& shape,
                                     const std::vector<int64_t>& layer_budgets,
                                     std::span<const float> window_weights) {
  KvKeptTokens kept = EmptyResult(shape);
  const int64_t n = shape.num_tokens;
  const bool evicts = std::any_of(layer_budgets.begin(), layer_budgets.end(),
                                  [n](int64_t b) { return b < n; });
  const int64_t layer_size = shape.num_q_heads * policy.observation_window * n;
  if (evicts) {
    KV_CHECK_EQ(static_cast<int64_t>(window_weights.size()), shape.num_layers * layer_size);
  }
  for (int64_t layer = 0; layer < shape.num_layers; ++layer) {
    std::span<const float> layer_weights;
    if (evicts) layer_weights = window_weights.subspan(layer * layer_size, layer_size);
    SelectSnapKvLayer(policy, shape, layer, layer_budgets[layer], layer_weights, kept);
  }
  return kept;
}

}  // namespace

const char* KvEvictionMethodName(KvEvictionMethod method) {
  switch (method) {
    case KvEvictionMethod::kNone: return "none";
    case KvEvictionMethod::kStreaming: return "streaming";
    case KvEvictionMethod::kH2o: return "h2o";
    case KvEvictionMethod::kSnapKv: return "snapkv";
    case KvEvictionMethod::kPyramidKv: return "pyramidkv";
  }
  return "?";
}

StatusOr<KvEvictionMethod> ParseKvEvictionMethod(std::string_view name) {
  for (KvEvictionMethod m : {KvEvictionMethod::kNone, KvEvictionMethod::kStreaming,
                             KvEvictionMethod::kH2o, KvEvictionMethod::kSnapKv,
                             KvEvictionMethod::kPyramidKv}) {
    if (name == KvEvictionMethodName(m)) return m;
  }
  return InvalidArgumentError("unknown KV eviction method \"" + std::string(name) +
                              "\" (expected one of: " + kMethodList + ")");
}

Status KvEvictionPolicy::Validate() const {
  if (method == KvEvictionMethod::kNone) return OkStatus();
  const char* name = KvEvictionMethodName(method);
  if (budget_tokens < 1) {
    return InvalidArgumentError(StrFormat("budget_tokens must be at least 1, got %lld",
                                          static_cast<long long>(budget_tokens)));
  }
  if (sink_tokens < 0) {
    return InvalidArgumentError(StrFormat("sink_tokens must be >= 0, got %lld",
                                          static_cast<long long>(sink_tokens)));
  }
  if (window_tokens.has_value() && *window_tokens < 0) {
    return InvalidArgumentError(StrFormat("window_tokens must be >= 0, got %lld",
                                          static_cast<long long>(*window_tokens)));
  }
  if (UsesSnapKvScores(method)) {
    if (observation_window < 1) {
      return InvalidArgumentError(StrFormat("observation_window must be at least 1, got %lld",
                                            static_cast<long long>(observation_window)));
    }
    if (pooling_kernel < 1 || pooling_kernel % 2 == 0) {
      return InvalidArgumentError(
          StrFormat("pooling_kernel must be odd and >= 1 (same padding), got %lld",
                    static_cast<long long>(pooling_kernel)));
    }
    if (window_tokens.has_value() && *window_tokens < observation_window) {
      return InvalidArgumentError(StrFormat(
          "window_tokens (%lld) must be at least observation_window (%lld) for %s: the "
          "observation window is always kept",
          static_cast<long long>(*window_tokens), static_cast<long long>(observation_window),
          name));
    }
  }
  if (method == KvEvictionMethod::kPyramidKv && pyramid_beta < 1) {
    return InvalidArgumentError(StrFormat("pyramid_beta must be at least 1, got %lld",
                                          static_cast<long long>(pyramid_beta)));
  }
  if (method == KvEvictionMethod::kStreaming) {
    if (budget_tokens <= sink_tokens) {
      return InvalidArgumentError(StrFormat(
          "budget_tokens (%lld) must exceed sink_tokens (%lld) for streaming",
          static_cast<long long>(budget_tokens), static_cast<long long>(sink_tokens)));
    }
    if (window_tokens.has_value() && *window_tokens != budget_tokens - sink_tokens) {
      return InvalidArgumentError(StrFormat(
          "window_tokens (%lld) must be unset or budget_tokens - sink_tokens (%lld) for "
          "streaming: every kept token after the sinks is in the window",
          static_cast<long long>(*window_tokens),
          static_cast<long long>(budget_tokens - sink_tokens)));
    }
    return OkStatus();
  }
  // h2o, snapkv, pyramidkv: at least one token chosen by score.
  const int64_t recent = recent_tokens();
  if (budget_tokens <= sink_tokens + recent) {
    return InvalidArgumentError(StrFormat(
        "budget_tokens (%lld) must exceed sink_tokens + window_tokens (%lld + %lld) for %s: "
        "no token would be chosen by score",
        static_cast<long long>(budget_tokens), static_cast<long long>(sink_tokens),
        static_cast<long long>(recent), name));
  }
  return OkStatus();
}

int64_t KvEvictionPolicy::recent_tokens() const {
  if (window_tokens.has_value()) return *window_tokens;
  switch (method) {
    case KvEvictionMethod::kNone: return 0;
    case KvEvictionMethod::kStreaming: return budget_tokens - sink_tokens;
    case KvEvictionMethod::kH2o: return std::max<int64_t>(0, (budget_tokens - sink_tokens) / 2);
    case KvEvictionMethod::kSnapKv:
    case KvEvictionMethod::kPyramidKv: return observation_window;
  }
  return 0;
}

std::string KvEvictionPolicy::ToString() const {
  auto ll = [](int64_t v) { return static_cast<long long>(v); };
  std::string s = KvEvictionMethodName(method);
  if (method == KvEvictionMethod::kNone) return s;
  s += StrFormat(" budget=%lld sink=%lld window=%lld", ll(budget_tokens), ll(sink_tokens),
                 ll(recent_tokens()));
  if (UsesSnapKvScores(method)) {
    s += StrFormat(" obs=%lld pool=%lld", ll(observation_window), ll(pooling_kernel));
  }
  if (method == KvEvictionMethod::kPyramidKv) s += StrFormat(" beta=%lld", ll(pyramid_beta));
  return s;
}

const std::vector<int64_t>& KvKeptTokens::at(int64_t layer, int64_t kv_head) const {
  KV_CHECK(layer >= 0 && layer < num_layers && kv_head >= 0 && kv_head < num_kv_heads)
      << "layer=" << layer << " kv_head=" << kv_head;
  return positions[layer * num_kv_heads + kv_head];
}

int64_t KvKeptTokens::total_kept() const {
  int64_t total = 0;
  for (const auto& p : positions) total += static_cast<int64_t>(p.size());
  return total;
}

KvKeptTokens SelectStreaming(const KvEvictionPolicy& policy, const KvEvictionShape& shape) {
  CheckPolicy(policy, KvEvictionMethod::kStreaming);
  CheckShape(shape);
  if (shape.num_tokens <= policy.budget_tokens) return KeepAll(shape);
  const int64_t num_sink = policy.sink_tokens;
  const std::vector<int64_t> one =
      SelectOneHead(shape.num_tokens, num_sink, policy.budget_tokens - num_sink, 0, {});
  KvKeptTokens kept = EmptyResult(shape);
  for (auto& p : kept.positions) p = one;
  return kept;
}

KvKeptTokens SelectH2o(const KvEvictionPolicy& policy, const KvEvictionShape& shape,
                       std::span<const float> accumulated_mass) {
  CheckPolicy(policy, KvEvictionMethod::kH2o);
  CheckShape(shape);
  const int64_t n = shape.num_tokens;
  if (n <= policy.budget_tokens) return KeepAll(shape);
  KV_CHECK_EQ(static_cast<int64_t>(accumulated_mass.size()),
              shape.num_layers * shape.num_kv_heads * n);
  const int64_t num_sink = policy.sink_tokens;
  const int64_t num_recent = policy.recent_tokens();
  const int64_t num_heavy = policy.budget_tokens - num_sink - num_recent;
  KvKeptTokens kept = EmptyResult(shape);
  for (int64_t i = 0; i < shape.num_layers * shape.num_kv_heads; ++i) {
    kept.positions[i] =
        SelectOneHead(n, num_sink, num_recent, num_heavy, accumulated_mass.subspan(i * n, n));
  }
  return kept;
}

KvKeptTokens SelectSnapKv(const KvEvictionPolicy& policy, const KvEvictionShape& shape,
                          std::span<const float> window_weights) {
  CheckPolicy(policy, KvEvictionMethod::kSnapKv);
  CheckShape(shape);
  return SelectSnapKvWithBudgets(
      policy, shape, std::vector<int64_t>(shape.num_layers, policy.budget_tokens),
      window_weights);
}

KvKeptTokens SelectPyramidKv(const KvEvictionPolicy& policy, const KvEvictionShape& shape,
                             std::span<const float> window_weights) {
  CheckPolicy(policy, KvEvictionMethod::kPyramidKv);
  CheckShape(shape);
  return SelectSnapKvWithBudgets(
      policy, shape, PyramidKvLayerBudgets(policy, shape.num_layers, shape.num_tokens),
      window_weights);
}

std::vector<int64_t> PyramidKvLayerBudgets(const KvEvictionPolicy& policy, int64_t num_layers,
                                           int64_t num_tokens) {
  CheckPolicy(policy, KvEvictionMethod::kPyramidKv);
  KV_CHECK_GT(num_layers, 0);
  KV_CHECK_GE(num_tokens, 0);
  if (num_tokens <= policy.budget_tokens) return std::vector<int64_t>(num_layers, num_tokens);
  const int64_t protected_tokens = policy.sink_tokens + policy.recent_tokens();
  const int64_t c = policy.budget_tokens - protected_tokens;  // > 0 (Validate)
  if (num_layers == 1) return {policy.budget_tokens};
  const int64_t selectable = num_tokens - protected_tokens;  // > c
  int64_t c_min = c / policy.pyramid_beta;
  int64_t c_max = 2 * c - c_min;
  if (c_max > selectable) {
    c_max = selectable;
    c_min = 2 * c - selectable;  // >= 0 because c_max <= 2c
  }
  // c_l = c_max - l * d / den exactly; floor(c_l) = c_max - ceil(l * d / den) and the
  // fractional part of c_l is ((den - (l * d) % den) % den) / den.
  const int64_t d = c_max - c_min;
  const int64_t den = num_layers - 1;
  std::vector<int64_t> selected(num_layers);
  std::vector<int64_t> frac_num(num_layers);
  int64_t total = 0;
  for (int64_t l = 0; l < num_layers; ++l) {
    const int64_t num = l * d;
    selected[l] = c_max - (num + den - 1) / den;
    frac_num[l] = (den - num % den) % den;
    total += selected[l];
  }
  // Largest remainder, ties to the lower layer: rounding up the layers with the largest
  // fractional parts keeps the sequence non-increasing (equal floors mean the lower layer has
  // the larger fraction) and never exceeds `selectable` (c_l <= c_max <= selectable).
  int64_t remainder = num_layers * c - total;
  KV_CHECK(remainder >= 0 && remainder < num_layers) << "remainder=" << remainder;
  std::vector<int64_t> order(num_layers);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return frac_num[a] > frac_num[b]; });
  for (int64_t i = 0; i < remainder; ++i) ++selected[order[i]];
  std::vector<int64_t> budgets(num_layers);
  for (int64_t l = 0; l < num_layers; ++l) {
    KV_CHECK(selected[l] >= 0 && selected[l] <= selectable) << "layer " << l;
    budgets[l] = selected[l] + protected_tokens;
  }
  return budgets;
}

KvKeptTokens SelectKeptTokens(const KvEvictionPolicy& policy, const KvEvictionShape& shape,
                              const KvEvictionScores& scores) {
  switch (policy.method) {
    case KvEvictionMethod::kNone: CheckShape(shape); return KeepAll(shape);
    case KvEvictionMethod::kStreaming: return SelectStreaming(policy, shape);
    case KvEvictionMethod::kH2o: return SelectH2o(policy, shape, scores.accumulated_mass);
    case KvEvictionMethod::kSnapKv: return SelectSnapKv(policy, shape, scores.window_weights);
    case KvEvictionMethod::kPyramidKv:
      return SelectPyramidKv(policy, shape, scores.window_weights);
  }
  KV_CHECK(false) << "unknown method";
  return {};
}

KvKeptTokens SelectKeptTokensFromMass(const KvEvictionPolicy& policy,
                                      const KvEvictionShape& shape,
                                      std::span<const float> attention_mass) {
  switch (policy.method) {
    case KvEvictionMethod::kNone: return KeepAll(shape);
    case KvEvictionMethod::kStreaming: return SelectStreaming(policy, shape);
    case KvEvictionMethod::kH2o: return SelectH2o(policy, shape, attention_mass);
    case KvEvictionMethod::kSnapKv:
    case KvEvictionMethod::kPyramidKv: break;
  }
  CheckPolicy(policy, policy.method);
  CheckShape(shape);
  const int64_t n = shape.num_tokens;
  const std::vector<int64_t> budgets =
      policy.method == KvEvictionMethod::kPyramidKv
          ? PyramidKvLayerBudgets(policy, shape.num_layers, n)
          : std::vector<int64_t>(static_cast<size_t>(shape.num_layers), policy.budget_tokens);
  KvKeptTokens kept = EmptyResult(shape);
  const bool evicts =
      std::any_of(budgets.begin(), budgets.end(), [n](int64_t b) { return b < n; });
  if (evicts) {
    KV_CHECK_EQ(static_cast<int64_t>(attention_mass.size()),
                shape.num_layers * shape.num_kv_heads * n);
  }
  const int64_t num_sink = policy.sink_tokens;
  const int64_t num_recent = policy.recent_tokens();
  const int64_t num_prefix = n - policy.observation_window;
  for (int64_t layer = 0; layer < shape.num_layers; ++layer) {
    const int64_t budget = budgets[static_cast<size_t>(layer)];
    for (int64_t g = 0; g < shape.num_kv_heads; ++g) {
      std::vector<int64_t>& out = kept.positions[layer * shape.num_kv_heads + g];
      if (n <= budget) {
        out = AllPositions(n);
        continue;
      }
      const std::span<const float> prefix =
          attention_mass.subspan((layer * shape.num_kv_heads + g) * n, num_prefix);
      const std::vector<float> votes = MaxPool1dSame(prefix, policy.pooling_kernel);
      out = SelectOneHead(n, num_sink, num_recent, budget - num_sink - num_recent, votes);
    }
  }
  return kept;
}

KvCompactionLayout CompactionLayout(const KvKeptTokens& kept) {
  KvCompactionLayout layout;
  std::vector<int64_t> counts(static_cast<size_t>(kept.num_layers), 0);
  for (int64_t l = 0; l < kept.num_layers; ++l) {
    counts[l] = static_cast<int64_t>(kept.at(l, 0).size());
    for (int64_t g = 1; g < kept.num_kv_heads; ++g) {
      KV_CHECK_EQ(static_cast<int64_t>(kept.at(l, g).size()), counts[l])
          << "layer " << l << " keeps different counts per KV head";
    }
    layout.num_slots = std::max(layout.num_slots, counts[l]);
  }
  for (int64_t l = 0; l < kept.num_layers; ++l) {
    layout.layer_key_begin.push_back(layout.num_slots - counts[l]);
  }
  return layout;
}

int64_t ContinuousCompactionSlots(const KvEvictionPolicy& policy, int64_t block_size) {
  return policy.budget_tokens + block_size;
}

bool CompactionDue(const KvEvictionPolicy& policy, const KvEvictionProgress& p,
                   int64_t block_size) {
  const int64_t trigger = ContinuousCompactionSlots(policy, block_size);
  switch (policy.method) {
    case KvEvictionMethod::kNone: return false;
    case KvEvictionMethod::kStreaming: return p.num_kv_slots >= trigger;
    case KvEvictionMethod::kH2o:
      if (p.num_computed_tokens > p.compress_at && p.num_kv_slots >= trigger) return true;
      [[fallthrough]];
    case KvEvictionMethod::kSnapKv:
    case KvEvictionMethod::kPyramidKv:
      return p.num_computed_tokens == p.compress_at && p.num_kv_slots > policy.budget_tokens;
  }
  return false;
}

int64_t TokensUntilCompaction(const KvEvictionPolicy& policy, const KvEvictionProgress& p,
                              int64_t block_size) {
  int64_t n = INT64_MAX;
  const int64_t trigger = ContinuousCompactionSlots(policy, block_size);
  const bool continuous =
      policy.method == KvEvictionMethod::kStreaming ||
      (policy.method == KvEvictionMethod::kH2o && p.num_computed_tokens >= p.compress_at);
  if (policy.method == KvEvictionMethod::kNone) return n;
  if (policy.method != KvEvictionMethod::kStreaming && p.num_computed_tokens < p.compress_at) {
    n = p.compress_at - p.num_computed_tokens;
  }
  if (continuous) n = std::min(n, std::max<int64_t>(0, trigger - p.num_kv_slots));
  return n;
}

int64_t MaxCachedTokensWithEviction(const KvEvictionPolicy& policy, int64_t compress_at,
                                    int64_t block_size) {
  switch (policy.method) {
    case KvEvictionMethod::kNone: return INT64_MAX;
    case KvEvictionMethod::kStreaming:
      return ContinuousCompactionSlots(policy, block_size) - 1;
    case KvEvictionMethod::kH2o: return 0;  // every prompt row's attention is scored
    case KvEvictionMethod::kSnapKv:
    case KvEvictionMethod::kPyramidKv:
      return std::max<int64_t>(0, compress_at - policy.observation_window);
  }
  return INT64_MAX;
}

std::vector<float> SumGqaGroups(std::span<const float> in, int64_t num_q_heads,
                                int64_t num_kv_heads, int64_t inner) {
  KV_CHECK(num_kv_heads > 0 && num_q_heads % num_kv_heads == 0 && inner >= 0);
  const int64_t block = num_q_heads * inner;
  KV_CHECK(block == 0 || static_cast<int64_t>(in.size()) % block == 0);
  const int64_t num_outer = block == 0 ? 0 : static_cast<int64_t>(in.size()) / block;
  const int64_t group = num_q_heads / num_kv_heads;
  std::vector<float> out(num_outer * num_kv_heads * inner, 0.0f);
  for (int64_t o = 0; o < num_outer; ++o) {
    for (int64_t h = 0; h < num_q_heads; ++h) {
      const float* src = in.data() + (o * num_q_heads + h) * inner;
      float* dst = out.data() + (o * num_kv_heads + h / group) * inner;
      for (int64_t t = 0; t < inner; ++t) dst[t] += src[t];
    }
  }
  return out;
}

void AccumulateAttentionMass(std::span<const float> weights, int64_t num_q_heads,
                             int64_t num_queries, int64_t num_kv_heads, std::span<float> mass) {
  KV_CHECK(num_kv_heads > 0 && num_q_heads % num_kv_heads == 0 && num_queries >= 0);
  KV_CHECK_EQ(static_cast<int64_t>(mass.size()) % num_kv_heads, 0);
  const int64_t num_keys = static_cast<int64_t>(mass.size()) / num_kv_heads;
  KV_CHECK_EQ(static_cast<int64_t>(weights.size()), num_q_heads * num_queries * num_keys);
  const int64_t group = num_q_heads / num_kv_heads;
  for (int64_t h = 0; h < num_q_heads; ++h) {
    float* dst = mass.data() + (h / group) * num_keys;
    for (int64_t i = 0; i < num_queries; ++i) {
      const float* row = weights.data() + (h * num_queries + i) * num_keys;
      for (int64_t t = 0; t < num_keys; ++t) dst[t] += row[t];
    }
  }
}

std::vector<float> MaxPool1dSame(std::span<const float> in, int64_t kernel) {
  KV_CHECK(kernel >= 1 && kernel % 2 == 1) << "kernel=" << kernel;
  const int64_t n = static_cast<int64_t>(in.size());
  const int64_t half = kernel / 2;
  std::vector<float> out(n);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t lo = std::max<int64_t>(0, t - half);
    const int64_t hi = std::min<int64_t>(n - 1, t + half);
    out[t] = *std::max_element(in.begin() + lo, in.begin() + hi + 1);
  }
  return out;
}

std::vector<float> SnapKvVotes(std::span<const float> window_weights, int64_t num_q_heads,
                               int64_t num_kv_heads, int64_t num_window_rows, int64_t num_tokens,
                               int64_t num_prefix_tokens, int64_t pooling_kernel) {
  KV_CHECK(num_kv_heads > 0 && num_q_heads % num_kv_heads == 0);
  KV_CHECK(num_prefix_tokens >= 0 && num_prefix_tokens <= num_tokens);
  KV_CHECK_EQ(static_cast<int64_t>(window_weights.size()),
              num_q_heads * num_window_rows * num_tokens);
  // Sum the window rows per query head (prefix columns only), then the GQA groups.
  std::vector<float> per_q_head(num_q_heads * num_prefix_tokens, 0.0f);
  for (int64_t h = 0; h < num_q_heads; ++h) {
    float* dst = per_q_head.data() + h * num_prefix_tokens;
    for (int64_t r = 0; r < num_window_rows; ++r) {
      const float* row = window_weights.data() + (h * num_window_rows + r) * num_tokens;
      for (int64_t t = 0; t < num_prefix_tokens; ++t) dst[t] += row[t];
    }
  }
  std::vector<float> votes = SumGqaGroups(per_q_head, num_q_heads, num_kv_heads,
                                          num_prefix_tokens);
  for (int64_t g = 0; g < num_kv_heads; ++g) {
    std::span<float> head(votes.data() + g * num_prefix_tokens, num_prefix_tokens);
    const std::vector<float> pooled = MaxPool1dSame(head, pooling_kernel);
    std::copy(pooled.begin(), pooled.end(), head.begin());
  }
  return votes;
}

std::vector<float> ReferenceAttentionWeights(std::span<const float> q, std::span<const float> k,
                                             std::span<const int64_t> query_positions,
                                             const ReferenceAttentionShape& shape) {
  const int64_t hq = shape.num_q_heads;
  const int64_t hkv = shape.num_kv_heads;
  const int64_t hd = shape.head_dim;
  const int64_t nk = shape.num_keys;
  const int64_t nq = static_cast<int64_t>(query_positions.size());
  KV_CHECK(hkv > 0 && hq % hkv == 0 && hd > 0 && nk >= 0);
  KV_CHECK_EQ(static_cast<int64_t>(q.size()), nq * hq * hd);
  KV_CHECK_EQ(static_cast<int64_t>(k.size()), nk * hkv * hd);
  const double scale = shape.scale != 0.0f ? shape.scale : 1.0 / std::sqrt(double(hd));
  const int64_t group = hq / hkv;
  std::vector<float> weights(hq * nq * nk, 0.0f);
  std::vector<double> scores;
  for (int64_t h = 0; h < hq; ++h) {
    const int64_t g = h / group;
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t pos = query_positions[i];
      KV_CHECK(pos >= 0 && pos < nk) << "query position " << pos << " of " << nk << " keys";
      const float* qi = q.data() + (i * hq + h) * hd;
      const int64_t num_visible = pos + 1;
      scores.assign(num_visible, 0.0);
      double max_score = -INFINITY;
      for (int64_t t = 0; t < num_visible; ++t) {
        const float* kt = k.data() + (t * hkv + g) * hd;
        double dot = 0.0;
        for (int64_t d = 0; d < hd; ++d) dot += static_cast<double>(qi[d]) * kt[d];
        scores[t] = dot * scale;
        max_score = std::max(max_score, scores[t]);
      }
      double sum = 0.0;
      for (double& s : scores) {
        s = std::exp(s - max_score);
        sum += s;
      }
      float* row = weights.data() + (h * nq + i) * nk;
      for (int64_t t = 0; t < num_visible; ++t) row[t] = static_cast<float>(scores[t] / sum);
    }
  }
  return weights;
}

}  // namespace kvserve

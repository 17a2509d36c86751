#include "sampling/sampler.h"

#include "base/check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>

namespace kvserve {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Index of the largest finite-or-infinite value; NaN never wins; lowest index on ties.
int64_t Argmax(const float* x, int64_t n) {
  int64_t best = 0;
  float best_value = kNegInf;
  bool found = false;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (std::isnan(v)) continue;
    if (!found || v > best_value) {
      best = i;
      best_value = v;
      found = true;
    }
  }
  return best;
}

// A candidate token during filtering.
struct Candidate {
  float value;  // logit, later probability
  TokenId id;
};

// Larger value first; lower id first on ties, so results never depend on sort stability.
bool Before(const Candidate& a, const Candidate& b) {
  if (a.value != b.value) return a.value > b.value;
  return a.id < b.id;
}

// Uniform double in [0, 1) from the top 53 bits: the same on every platform and library
// (std::uniform_real_distribution is not specified bit for bit).
double UniformDouble(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace

Status SamplingParams::Validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0f) {
    return InvalidArgumentError("temperature must be >= 0, got " + std::to_string(temperature));
  }
  if (!std::isfinite(top_p) || top_p <= 0.0f || top_p > 1.0f) {
    return InvalidArgumentError("top_p must be in (0, 1], got " + std::to_string(top_p));
  }
  if (!std::isfinite(min_p) || min_p < 0.0f || min_p > 1.0f) {
    return InvalidArgumentError("min_p must be in [0, 1], got " + std::to_string(min_p));
  }
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f) {
    return InvalidArgumentError("repetition_penalty must be > 0, got " +
                                std::to_string(repetition_penalty));
  }
  if (!std::isfinite(presence_penalty) || presence_penalty < -2.0f || presence_penalty > 2.0f) {
    return InvalidArgumentError("presence_penalty must be in [-2, 2], got " +
                                std::to_string(presence_penalty));
  }
  if (!std::isfinite(frequency_penalty) || frequency_penalty < -2.0f ||
      frequency_penalty > 2.0f) {
    return InvalidArgumentError("frequency_penalty must be in [-2, 2], got " +
                                std::to_string(frequency_penalty));
  }
  return OkStatus();
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

SampledLogprobs ComputeLogprobs(const float* logits, int64_t vocab_size, TokenId sampled,
                                int32_t num_top) {
  KV_CHECK(vocab_size > 0 && sampled >= 0 && sampled < vocab_size);
  float max_logit = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab_size; ++i) max_logit = std::max(max_logit, logits[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab_size; ++i) sum += std::exp(static_cast<double>(logits[i] - max_logit));
  const double log_z = static_cast<double>(max_logit) + std::log(sum);
  auto logprob = [&](TokenId t) { return static_cast<float>(logits[t] - log_z); };

  SampledLogprobs out;
  out.sampled = {sampled, logprob(sampled)};
  // Rank: 1 + tokens strictly more likely (ties ranked by id, as in the top list).
  const float v = logits[sampled];
  out.rank = 1;
  for (int64_t i = 0; i < vocab_size; ++i) {
    if (logits[i] > v || (logits[i] == v && i < sampled)) ++out.rank;
  }
  const int64_t k = std::min<int64_t>(std::max<int32_t>(num_top, 0), vocab_size);
  if (k > 0) {
    // Running top-k in a small sorted array: cheap for k <= kMaxLogprobs.
    std::vector<TokenId> top;
    top.reserve(static_cast<size_t>(k) + 1);
    auto better = [&](TokenId a, TokenId b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    for (TokenId i = 0; i < vocab_size; ++i) {
      if (static_cast<int64_t>(top.size()) == k && !better(i, top.back())) continue;
      top.insert(std::upper_bound(top.begin(), top.end(), i, better), i);
      if (static_cast<int64_t>(top.size()) > k) top.pop_back();
    }
    for (TokenId t : top) out.top.push_back({t, logprob(t)});
  }
  return out;
}

TokenId Sampler::Sample(float* logits, int64_t vocab_size,
                        const std::vector<TokenId>& prompt_tokens,
                        const std::vector<TokenId>& output_tokens) {
  if (vocab_size <= 0) return 0;

  // 1. Penalties (vLLM semantics). Repetition: every token seen in prompt or output, once.
  if (params_.repetition_penalty != 1.0f) {
    std::vector<bool> seen(static_cast<size_t>(vocab_size), false);
    auto mark = [&](const std::vector<TokenId>& tokens) {
      for (TokenId t : tokens) {
        if (t >= 0 && t < vocab_size) seen[static_cast<size_t>(t)] = true;
      }
    };
    mark(prompt_tokens);
    mark(output_tokens);
    const float r = params_.repetition_penalty;
    for (int64_t i = 0; i < vocab_size; ++i) {
      if (!seen[static_cast<size_t>(i)]) continue;
      logits[i] = logits[i] > 0.0f ? logits[i] / r : logits[i] * r;
    }
  }
  // Presence and frequency: output tokens only.
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    std::unordered_map<TokenId, int64_t> counts;
    for (TokenId t : output_tokens) {
      if (t >= 0 && t < vocab_size) ++counts[t];
    }
    for (const auto& [id, count] : counts) {
      logits[id] -= params_.frequency_penalty * static_cast<float>(count) +
                    params_.presence_penalty;
    }
  }

  // 2. Greedy.
  if (params_.temperature == 0.0f) return static_cast<TokenId>(Argmax(logits, vocab_size));

  // 3. Temperature. NaN logits are dropped (treated as -inf).
  const float inv_t = 1.0f / params_.temperature;
  std::vector<Candidate> cands;
  cands.reserve(static_cast<size_t>(vocab_size));
  for (int64_t i = 0; i < vocab_size; ++i) {
    const float v = logits[i];
    if (std::isnan(v) || v == kNegInf) continue;
    cands.push_back({v * inv_t, static_cast<TokenId>(i)});
  }
  if (cands.empty()) return static_cast<TokenId>(Argmax(logits, vocab_size));
  // +inf logits: the uniform choice among them is the limit of the softmax; keep only them.
  bool has_pos_inf = false;
  for (const Candidate& c : cands) has_pos_inf |= (c.value == std::numeric_limits<float>::infinity());
  if (has_pos_inf) {
    std::vector<Candidate> inf;
    for (const Candidate& c : cands) {
      if (c.value == std::numeric_limits<float>::infinity()) inf.push_back({0.0f, c.id});
    }
    cands.swap(inf);
  }

  // 4. Top-k: keep the k largest (ties broken towards lower ids), sorted.
  bool sorted = false;
  const int64_t k = params_.top_k;
  if (k > 0 && k < static_cast<int64_t>(cands.size())) {
    std::partial_sort(cands.begin(), cands.begin() + k, cands.end(), Before);
    cands.resize(static_cast<size_t>(k));
    sorted = true;
  }

  // Softmax over the survivors (probabilities in `value`).
  float max_logit = kNegInf;
  for (const Candidate& c : cands) max_logit = std::max(max_logit, c.value);
  double sum = 0.0;
  for (Candidate& c : cands) {
    c.value = std::exp(c.value - max_logit);
    sum += c.value;
  }
  for (Candidate& c : cands) c.value = static_cast<float>(c.value / sum);

  // 5. Top-p: the smallest prefix (by descending probability) whose mass reaches top_p.
  if (params_.top_p < 1.0f) {
    if (!sorted) {
      std::sort(cands.begin(), cands.end(), Before);
      sorted = true;
    }
    double cum = 0.0;
    size_t keep = cands.size();
    for (size_t i = 0; i < cands.size(); ++i) {
      cum += cands[i].value;
      if (cum >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
    cands.resize(std::max<size_t>(keep, 1));
  }

  // 6. Min-p: drop tokens below min_p times the most likely token's probability.
  if (params_.min_p > 0.0f) {
    float max_prob = 0.0f;
    for (const Candidate& c : cands) max_prob = std::max(max_prob, c.value);
    const float threshold = params_.min_p * max_prob;
    std::vector<Candidate> kept;
    kept.reserve(cands.size());
    for (const Candidate& c : cands) {
      if (c.value >= threshold) kept.push_back(c);
    }
    cands.swap(kept);  // never empty: the max itself passes
  }

  // 7. Seeded draw over the renormalized survivors.
  double total = 0.0;
  for (const Candidate& c : cands) total += c.value;
  const double u = UniformDouble(rng_) * total;
  double cum = 0.0;
  for (const Candidate& c : cands) {
    cum += c.value;
    if (u < cum) return c.id;
  }
  // Rounding left u at the very top: the last candidate with non-zero mass.
  for (auto it = cands.rbegin(); it != cands.rend(); ++it) {
    if (it->value > 0.0f) return it->id;
  }
  return cands.back().id;
}

}  // namespace kvserve

// Sampling: logits -> next token, with the usual processors applied in llama.cpp / vLLM order:
// penalties (repetition, presence, frequency) -> temperature -> top-k -> top-p -> min-p ->
// seeded draw. temperature == 0 is greedy (argmax, lowest id on ties). Not thread-safe; one
// Sampler per sequence (it owns the sequence's RNG).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "base/status.h"
#include "base/ids.h"

namespace kvserve {

struct SamplingParams {
  float temperature = 1.0f;        // 0 = greedy
  int32_t top_k = 0;               // 0 or negative = off
  float top_p = 1.0f;              // 1 = off
  float min_p = 0.0f;              // 0 = off
  float repetition_penalty = 1.0f; // 1 = off (CTRL-style: divide positive logits, multiply negative)
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;               // same seed + same logits -> same tokens

  Status Validate() const;  // ranges as in the OpenAI / vLLM APIs
};

// Log-probability of one token under the model's raw distribution (log-softmax of the logits,
// before penalties, temperature and truncation: what vLLM V1 returns by default).
struct TokenLogprob {
  TokenId token = kNoToken;
  float logprob = 0.0f;
};

// The log-probabilities returned with one sampled token: its own (and its rank, 1 = the most
// likely token) and the `logprobs` most likely tokens, most likely first.
struct SampledLogprobs {
  TokenLogprob sampled;
  int64_t rank = 0;
  std::vector<TokenLogprob> top;
};

// Most alternatives a request may ask for (vLLM's default max_logprobs is 20).
inline constexpr int32_t kMaxLogprobs = 20;

// Log-softmax of a raw logits row (vocab_size values, unchanged) evaluated for `sampled` and
// for the num_top most likely tokens (ties: lower id first). O(vocab_size).
SampledLogprobs ComputeLogprobs(const float* logits, int64_t vocab_size, TokenId sampled,
                                int32_t num_top);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // `logits` has vocab_size values and is modified in place. `history` holds the tokens the
  // penalties look at (prompt + output for repetition, output only for presence/frequency as
  // in vLLM: pass both spans).
  TokenId Sample(float* logits, int64_t vocab_size, const std::vector<TokenId>& prompt_tokens,
                 const std::vector<TokenId>& output_tokens);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace kvserve

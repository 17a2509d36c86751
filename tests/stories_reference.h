// Test-only: the stories260K greedy reference cases (../shared/assets/models/stories260K/
// greedy_reference.json), shared by the tests that check generation against them, and the
// way they run: as requests through an EngineCore (the one path that runs sequences).
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/engine_core.h"
#include "tokenizer/vocab_spec.h"

namespace kvserve::stories {

inline constexpr TokenId kBos = 1;

inline std::string StoriesDir() {
  return std::string(KVSERVE_ASSETS_DIR) + "/models/stories260K";
}

struct Case {
  std::vector<TokenId> prompt;  // with BOS
  int64_t steps = 0;
  std::vector<TokenId> ids_after_bos;
};

inline std::vector<Case> LoadCases() {
  std::ifstream in(StoriesDir() + "/greedy_reference.json");
  nlohmann::json j = nlohmann::json::parse(in);
  std::vector<Case> cases;
  for (const auto& c : j.at("cases")) {
    Case x;
    x.prompt = c.at("prompt_ids_with_bos").get<std::vector<TokenId>>();
    x.steps = c.at("steps").get<int64_t>();
    x.ids_after_bos = c.at("ids_after_bos").get<std::vector<TokenId>>();
    cases.push_back(std::move(x));
  }
  return cases;
}

// run.c semantics as a request: the prompt (with BOS) is forced, then greedy; `steps`
// positions hold KV, so prompt + output = steps + 1 (the last token is sampled, never fed);
// a sampled BOS ends it (the core's eos_token_ids must be {kBos}).
inline RequestInput CaseRequest(const Case& c) {
  RequestInput in;
  in.prompt_ids = c.prompt;
  in.max_tokens = c.steps + 1 - static_cast<int64_t>(c.prompt.size());
  in.sampling.temperature = 0.0f;
  return in;
}

// Engine settings for the cases: max_model_len 512 (the model's context), BOS ends a story.
inline EngineCoreOptions CaseEngineOptions(int64_t max_num_seqs, int64_t max_num_batched_tokens,
                                           int64_t long_prefill_token_threshold = 0) {
  EngineCoreOptions o;
  o.check_invariants = true;
  o.enable_prefix_caching = false;
  o.scheduler.max_model_len = 512;
  o.scheduler.max_num_seqs = max_num_seqs;
  o.scheduler.max_num_batched_tokens = max_num_batched_tokens;
  o.scheduler.long_prefill_token_threshold = long_prefill_token_threshold;
  o.scheduler.eos_token_ids = {kBos};
  return o;
}

// Runs the cases through `core`, case i joining before step i * stagger_steps, and returns
// each case's ids after BOS (prompt after BOS, then the output without a stopping BOS), the
// form of Case::ids_after_bos.
inline std::vector<std::vector<TokenId>> RunCases(EngineCore& core, const std::vector<Case>& cases,
                                                  int64_t stagger_steps = 0) {
  std::map<SeqId, std::vector<TokenId>> outs;
  size_t added = 0;
  for (int64_t step = 0; added < cases.size() || core.has_unfinished(); ++step) {
    while (added < cases.size() && static_cast<int64_t>(added) * stagger_steps <= step) {
      const Case& c = cases[added];
      outs[static_cast<SeqId>(added)].assign(c.prompt.begin() + 1, c.prompt.end());
      const Status s = core.add_request(static_cast<SeqId>(added), CaseRequest(c));
      if (!s.ok()) return {};
      ++added;
    }
    for (const RequestOutput& o : core.step().outputs) {
      for (TokenId t : o.new_token_ids) {
        if (!(o.finish_reason == FinishReason::kStop && t == o.stop_token_id)) {
          outs[o.id].push_back(t);
        }
      }
    }
  }
  std::vector<std::vector<TokenId>> result;
  for (auto& [id, ids] : outs) result.push_back(std::move(ids));
  return result;
}

// Logits of every position of `tokens` (row p: the distribution after tokens[0..p]) through
// `core` as one scoring request. A dummy token is appended so that the last position has a
// row too (rows never depend on later tokens).
inline std::vector<float> ScoreAllPositions(EngineCore& core, const std::vector<TokenId>& tokens) {
  RequestInput in;
  in.prompt_ids = tokens;
  in.prompt_ids.push_back(kBos);
  in.max_tokens = 0;
  in.prompt_logits_start = 0;
  std::vector<float> logits;
  if (!core.add_request(1000, std::move(in)).ok()) return logits;
  while (core.has_unfinished()) {
    for (const RequestOutput& o : core.step().outputs) {
      logits.insert(logits.end(), o.prompt_logits.rows.begin(), o.prompt_logits.rows.end());
    }
  }
  return logits;
}

}  // namespace kvserve::stories

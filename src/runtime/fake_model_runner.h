// FakeModelRunner: a test stand-in for the model runner. It executes a SchedulerOutput
// against a fake KV storage that holds, for every slot, the token whose "KV" was written
// there, and checks what a real runner would silently get wrong:
//   - every scheduled range starts at the request's num_computed_tokens and continues where
//     the previous step of that request ended (no gaps; recomputation only after preemption,
//     from the prefix-cache hit);
//   - the block table has room for the range;
//   - the KV that the range attends to (positions 0 .. end-1, read through the block table,
//     cached blocks included) holds exactly the request's tokens: nothing evicted,
//     overwritten or shared wrongly.
// Sampled tokens are a fixed function of (request id, position), so a run under memory
// pressure (preemptions) must produce the same outputs as an unconstrained one.
// Test helper, header-only. Not thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "runtime/scheduler.h"

namespace kvserve {

struct FakeModelRunnerOptions {
  int32_t vocab_size = 1000;
  TokenId eos_id = kNoToken;
  int64_t eos_one_in = 0;  // a sampled token is eos_id with probability 1/eos_one_in (0: never)
};

class FakeModelRunner {
 public:
  FakeModelRunner(const FakeModelRunnerOptions& options, const KvCacheManager* kv)
      : options_(options),
        kv_(kv),
        slots_(static_cast<size_t>(kv->num_blocks() * kv->block_size()), kNoToken) {}

  // The token a request samples at `position` (its index in all_token_ids()). Never eos_id
  // unless the eos draw says so.
  static TokenId token_for(SeqId id, int64_t position, const FakeModelRunnerOptions& options) {
    uint64_t h = Mix(static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull ^
                     Mix(static_cast<uint64_t>(position) + 0x1234567ull));
    if (options.eos_one_in > 0 && options.eos_id != kNoToken &&
        h % static_cast<uint64_t>(options.eos_one_in) == 0) {
      return options.eos_id;
    }
    TokenId t = static_cast<TokenId>((h >> 17) % static_cast<uint64_t>(options.vocab_size));
    if (t == options.eos_id) t = (t + 1) % options.vocab_size;
    return t;
  }
  TokenId token_for(SeqId id, int64_t position) const { return token_for(id, position, options_); }

  ModelOutput execute(const SchedulerOutput& out, const Scheduler& scheduler) {
    ModelOutput model;
    for (const ScheduledSeq& s : out.seqs) {
      const Request* r = scheduler.request(s.id);
      if (r == nullptr) {
        error(s.id, "scheduled but unknown to the scheduler");
        continue;
      }
      const int64_t start = s.num_computed_tokens;
      const int64_t end = start + s.num_new_tokens;
      if (start != r->num_computed_tokens()) {
        error(s.id, "starts at " + std::to_string(start) + " but num_computed_tokens is " +
                        std::to_string(r->num_computed_tokens()));
      }
      if (s.num_new_tokens < 1 || end > r->num_tokens()) {
        error(s.id, "range [" + std::to_string(start) + ", " + std::to_string(end) +
                        ") outside its " + std::to_string(r->num_tokens()) + " tokens");
        continue;
      }
      if (s.samples != (end == r->num_tokens())) error(s.id, "samples flag wrong");
      auto known = progress_.find(s.id);
      if (known == progress_.end() || known->second.num_preemptions != r->num_preemptions()) {
        // First schedule since (re)admission: starts at the prefix-cache hit.
        if (start != r->num_cached_tokens()) {
          error(s.id, "admitted at " + std::to_string(start) + " but num_cached_tokens is " +
                          std::to_string(r->num_cached_tokens()));
        }
        if (known != progress_.end()) num_recomputed_tokens_ += std::max<int64_t>(
            0, std::min(known->second.num_computed_tokens, end) - start);
      } else if (start != known->second.num_computed_tokens) {
        error(s.id, "starts at " + std::to_string(start) + " but the previous step ended at " +
                        std::to_string(known->second.num_computed_tokens));
      }
      const BlockTable& table = kv_->block_table(s.id);
      if (table.capacity_tokens() < end) {
        error(s.id, "block table holds " + std::to_string(table.capacity_tokens()) +
                        " tokens, step needs " + std::to_string(end));
        continue;
      }
      const std::vector<TokenId>& tokens = r->all_token_ids();
      for (int64_t p = start; p < end; ++p) slots_[static_cast<size_t>(table.slot(p))] = tokens[p];
      for (int64_t p = 0; p < end; ++p) {
        const TokenId seen = slots_[static_cast<size_t>(table.slot(p))];
        if (seen != tokens[p]) {
          error(s.id, "KV at position " + std::to_string(p) + " holds token " +
                          std::to_string(seen) + ", expected " + std::to_string(tokens[p]));
          break;
        }
      }
      progress_[s.id] = {end, r->num_preemptions()};
      num_computed_tokens_ += s.num_new_tokens;
      if (s.samples) model.sampled[s.id] = token_for(s.id, r->num_tokens());
    }
    for (SeqId id : out.finished_ids) progress_.erase(id);
    return model;
  }

  const std::vector<std::string>& errors() const { return errors_; }
  int64_t num_computed_tokens() const { return num_computed_tokens_; }
  // Tokens computed again after a preemption (their KV had been computed before).
  int64_t num_recomputed_tokens() const { return num_recomputed_tokens_; }

 private:
  struct Progress {
    int64_t num_computed_tokens = 0;
    int64_t num_preemptions = 0;
  };

  static uint64_t Mix(uint64_t x) {  // splitmix64 finalizer
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  }
  void error(SeqId id, const std::string& what) {
    if (errors_.size() < 20) errors_.push_back("request " + std::to_string(id) + ": " + what);
  }

  FakeModelRunnerOptions options_;
  const KvCacheManager* kv_;
  std::vector<TokenId> slots_;  // [num_blocks * block_size]: token whose KV is in the slot
  std::unordered_map<SeqId, Progress> progress_;
  std::vector<std::string> errors_;
  int64_t num_computed_tokens_ = 0;
  int64_t num_recomputed_tokens_ = 0;
};

}  // namespace kvserve

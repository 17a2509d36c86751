// AttentionMassTracker: the attention statistics token eviction scores with (H2O's mass
// accumulated over every row, SnapKV's and PyramidKV's observation-window votes), per running
// request, in the cache's slot space (docs/kv-eviction.md, "Scores from the kernels").
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "base/ids.h"
#include "kv/token_eviction.h"
#include "model/llama.h"
#include "runtime/request.h"

namespace kvserve {

// Owns one buffer per request that records statistics: [num_layers, num_kv_heads, stride]
// floats, slot t of layer l and KV head h at (l * num_kv_heads + h) * stride + t, stride >= the
// request's slots (grown by doubling). Which rows record:
//   h2o: every row it computes, prompt and output (the mass H2O accumulates over its decode
//        steps, the prompt's rows included); carried over a compaction to the kept slots;
//   snapkv, pyramidkv: the rows of prompt positions [compress_at - observation_window,
//        compress_at), while the request is not yet compacted and its compression point holds
//        more than the budget; dropped after the compaction;
//   none, streaming: nothing.
// Invariant: a request's buffer describes exactly its slots 0 .. num_kv_slots() - 1 as the
// engine computed them since it was last (re)started; the engine calls erase() on preemption
// and when the request finishes. Engine thread only, not thread-safe.
class AttentionMassTracker {
 public:
  AttentionMassTracker(int64_t num_layers, int64_t num_kv_heads);

  // The statistics batch sequence `seq_index` (request r, computing num_new_tokens tokens from
  // slot r.num_kv_slots()) must record in this step, or nullopt if none. The buffer grows to
  // hold the step's slots; the pointer stays valid until the next call for r.
  std::optional<AttentionMassRequest> prepare(const Request& r, int64_t seq_index,
                                              int64_t num_new_tokens);
  // [num_layers, num_kv_heads, num_slots] (SelectKeptTokensFromMass's layout): the request's
  // first num_slots slots; zeros for a request that recorded nothing.
  std::vector<float> packed(SeqId id, int64_t num_slots) const;
  // After request r's compaction kept `kept` (positions = its old slots) at `layout`'s slots:
  // h2o moves each kept slot's mass to its new slot and clears the rest; the others drop theirs.
  void compacted(const Request& r, const KvKeptTokens& kept, const KvCompactionLayout& layout);
  // Drops a request's statistics: it finished, or was preempted (recomputed from slot 0).
  void erase(SeqId id) { mass_.erase(id); }

  int64_t num_tracked() const { return static_cast<int64_t>(mass_.size()); }

 private:
  struct Mass {
    int64_t stride = 0;
    std::vector<float> data;
  };
  void Grow(Mass& m, int64_t num_slots) const;

  int64_t num_layers_;
  int64_t num_kv_heads_;
  std::unordered_map<SeqId, Mass> mass_;
};

}  // namespace kvserve

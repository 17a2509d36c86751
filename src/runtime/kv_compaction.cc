#include "runtime/kv_compaction.h"

#include "base/check.h"
#include "kv/token_eviction.h"

namespace kvserve {

std::optional<KvCompaction> CompactSequenceKv(const Request& r,
                                              std::span<const float> attention_mass,
                                              KvCacheManager* kv, KvStorage* storage,
                                              LlamaModel* model) {
  const KvEvictionPolicy& policy = r.input().kv_policy;
  const ModelConfig& c = model->config();
  const KvEvictionShape shape{c.num_layers, c.num_heads, c.num_kv_heads, r.num_kv_slots()};
  const KvKeptTokens kept = SelectKeptTokensFromMass(policy, shape, attention_mass);
  const KvCompactionLayout layout = CompactionLayout(kept);
  const bool streaming = policy.method == KvEvictionMethod::kStreaming;
  const bool ok = kv->compact(r.id(), layout.num_slots, [&](const BlockTable& from,
                                                           const BlockTable& to) {
    std::vector<std::vector<int64_t>> src(static_cast<size_t>(c.num_kv_heads));
    std::vector<std::vector<int64_t>> dst(static_cast<size_t>(c.num_kv_heads));
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const int64_t first = layout.layer_key_begin[static_cast<size_t>(l)];
      for (int64_t h = 0; h < c.num_kv_heads; ++h) {
        const std::vector<int64_t>& positions = kept.at(l, h);
        src[h].clear();
        dst[h].clear();
        for (size_t i = 0; i < positions.size(); ++i) {
          src[h].push_back(from.slot(positions[i]));
          dst[h].push_back(to.slot(first + static_cast<int64_t>(i)));
        }
      }
      storage->MoveHeadSlots(l, src, dst);
    }
    if (streaming) {
      // Positions within the cache: kept token i (at slot i now) was at slot positions[i].
      const std::vector<int64_t>& positions = kept.at(0, 0);
      std::vector<int64_t> slots, deltas;
      for (size_t i = 0; i < positions.size(); ++i) {
        if (positions[i] == static_cast<int64_t>(i)) continue;
        slots.push_back(to.slot(static_cast<int64_t>(i)));
        deltas.push_back(static_cast<int64_t>(i) - positions[i]);
      }
      const Status s = model->ShiftStoredKeys(storage, slots.data(), deltas.data(),
                                              static_cast<int64_t>(slots.size()));
      KV_CHECK(s.ok()) << "re-rotation of request " << r.id() << ": " << s.ToString();
    }
  });
  if (!ok) return std::nullopt;
  KvCompaction result;
  result.num_kv_slots = layout.num_slots;
  result.layer_key_begin = layout.layer_key_begin;
  const int64_t num_lists = c.num_layers * c.num_kv_heads;
  result.num_evicted_tokens =
      r.num_kv_slots() - (kept.total_kept() + num_lists / 2) / num_lists;
  return result;
}

}  // namespace kvserve

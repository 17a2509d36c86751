#include "runtime/kv_compaction.h"

#include "base/check.h"
#include "kv/token_eviction.h"

namespace kvserve {

KvCompaction CompactSequenceKv(const Request& r, std::span<const float> attention_mass,
                              KvCacheManager* kv, KvStorage* storage, LlamaModel* model) {
  const KvEvictionPolicy& policy = r.input().kv_policy;
  const ModelConfig& c = model->config();
  // The cache's KV heads (MLA: the one latent row every query head attends).
  const int64_t kv_heads = storage->spec().num_kv_heads;
  const KvEvictionShape shape{c.num_layers, c.num_heads, kv_heads, r.num_kv_slots()};
  KvCompaction result;
  result.kept = SelectKeptTokensFromMass(policy, shape, attention_mass);
  result.layout = CompactionLayout(result.kept);
  const KvKeptTokens& kept = result.kept;
  const KvCompactionLayout& layout = result.layout;
  if (!kv->can_compact(r.id(), layout.num_slots)) return result;
  result.compacted = true;
  const bool streaming = policy.method == KvEvictionMethod::kStreaming;
  // Per layer and KV head, the old slots of the kept positions, then their new slots.
  std::vector<std::vector<std::vector<int64_t>>> slots(
      static_cast<size_t>(c.num_layers),
      std::vector<std::vector<int64_t>>(static_cast<size_t>(kv_heads)));
  std::vector<KvStorage::SlotRows> rows(static_cast<size_t>(c.num_layers));
  auto gather = [&](const BlockTable& from) {
    for (int64_t l = 0; l < c.num_layers; ++l) {
      for (int64_t h = 0; h < kv_heads; ++h) {
        for (int64_t p : kept.at(l, h)) slots[l][h].push_back(from.slot(p));
      }
      storage->GatherHeadSlots(l, slots[l], &rows[l]);
    }
  };
  auto scatter = [&](const BlockTable& to) {
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const int64_t first = layout.layer_key_begin[static_cast<size_t>(l)];
      for (int64_t h = 0; h < kv_heads; ++h) {
        for (size_t i = 0; i < slots[l][h].size(); ++i) {
          slots[l][h][i] = to.slot(first + static_cast<int64_t>(i));
        }
      }
      storage->ScatterHeadSlots(l, slots[l], rows[l]);
    }
    if (streaming) {
      // Positions within the cache: kept token i (at slot i now) was at slot positions[i].
      const std::vector<int64_t>& positions = kept.at(0, 0);
      std::vector<int64_t> shifted, deltas;
      for (size_t i = 0; i < positions.size(); ++i) {
        if (positions[i] == static_cast<int64_t>(i)) continue;
        shifted.push_back(to.slot(static_cast<int64_t>(i)));
        deltas.push_back(static_cast<int64_t>(i) - positions[i]);
      }
      const Status s = model->ShiftStoredKeys(storage, shifted.data(), deltas.data(),
                                              static_cast<int64_t>(shifted.size()));
      KV_CHECK(s.ok()) << "re-rotation of request " << r.id() << ": " << s.ToString();
    }
  };
  kv->compact(r.id(), layout.num_slots, gather, scatter);
  result.num_kv_slots = layout.num_slots;
  result.layer_key_begin = layout.layer_key_begin;
  const int64_t num_lists = c.num_layers * kv_heads;
  result.num_evicted_tokens =
      r.num_kv_slots() - (kept.total_kept() + num_lists / 2) / num_lists;
  return result;
}

}  // namespace kvserve

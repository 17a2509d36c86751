#include "runtime/attention_mass.h"

#include <algorithm>

#include "base/check.h"

namespace kvserve {

AttentionMassTracker::AttentionMassTracker(int64_t num_layers, int64_t num_kv_heads)
    : num_layers_(num_layers), num_kv_heads_(num_kv_heads) {
  KV_CHECK(num_layers_ > 0 && num_kv_heads_ > 0);
}

void AttentionMassTracker::Grow(Mass& m, int64_t num_slots) const {
  if (num_slots <= m.stride) return;
  const int64_t stride = std::max({num_slots, 2 * m.stride, int64_t{64}});
  const int64_t num_lists = num_layers_ * num_kv_heads_;
  std::vector<float> data(static_cast<size_t>(num_lists * stride), 0.0f);
  for (int64_t i = 0; i < num_lists && m.stride > 0; ++i) {
    std::copy_n(m.data.begin() + i * m.stride, m.stride, data.begin() + i * stride);
  }
  m.data = std::move(data);
  m.stride = stride;
}

std::optional<AttentionMassRequest> AttentionMassTracker::prepare(const Request& r,
                                                                  int64_t seq_index,
                                                                  int64_t num_new_tokens) {
  const KvEvictionPolicy& policy = r.input().kv_policy;
  const int64_t first_position = r.num_computed_tokens();
  int64_t first_row = 0;
  switch (policy.method) {
    case KvEvictionMethod::kNone:
    case KvEvictionMethod::kStreaming:
      return std::nullopt;
    case KvEvictionMethod::kH2o:
      break;
    case KvEvictionMethod::kSnapKv:
    case KvEvictionMethod::kPyramidKv: {
      const int64_t compress_at = r.compress_at();
      const int64_t window_begin = std::max<int64_t>(0, compress_at - policy.observation_window);
      const bool compacted = r.num_kv_slots() != r.num_computed_tokens();
      if (compacted || compress_at <= policy.budget_tokens || first_position >= compress_at ||
          first_position + num_new_tokens <= window_begin) {
        return std::nullopt;
      }
      first_row = std::max<int64_t>(0, window_begin - first_position);
      break;
    }
  }
  Mass& m = mass_[r.id()];
  Grow(m, r.num_kv_slots() + num_new_tokens);
  return AttentionMassRequest{seq_index, first_row, m.data.data(), m.stride};
}

std::vector<float> AttentionMassTracker::packed(SeqId id, int64_t num_slots) const {
  const int64_t num_lists = num_layers_ * num_kv_heads_;
  std::vector<float> out(static_cast<size_t>(num_lists * num_slots), 0.0f);
  auto it = mass_.find(id);
  if (it == mass_.end()) return out;
  const Mass& m = it->second;
  KV_CHECK_LE(num_slots, m.stride) << "request " << id << " recorded fewer slots";
  for (int64_t i = 0; i < num_lists; ++i) {
    std::copy_n(m.data.begin() + i * m.stride, num_slots, out.begin() + i * num_slots);
  }
  return out;
}

void AttentionMassTracker::compacted(const Request& r, const KvKeptTokens& kept,
                                     const KvCompactionLayout& layout) {
  auto it = mass_.find(r.id());
  if (it == mass_.end()) return;
  if (r.input().kv_policy.method != KvEvictionMethod::kH2o) {
    mass_.erase(it);
    return;
  }
  Mass& m = it->second;
  KV_CHECK(kept.num_layers == num_layers_ && kept.num_kv_heads == num_kv_heads_);
  std::vector<float> moved(static_cast<size_t>(m.stride));
  for (int64_t l = 0; l < num_layers_; ++l) {
    const int64_t first = layout.layer_key_begin[static_cast<size_t>(l)];
    for (int64_t h = 0; h < num_kv_heads_; ++h) {
      float* list = m.data.data() + (l * num_kv_heads_ + h) * m.stride;
      std::fill(moved.begin(), moved.end(), 0.0f);
      const std::vector<int64_t>& positions = kept.at(l, h);
      for (size_t i = 0; i < positions.size(); ++i) {
        KV_CHECK_LT(positions[i], m.stride);
        moved[static_cast<size_t>(first) + i] = list[positions[i]];
      }
      std::copy(moved.begin(), moved.end(), list);
    }
  }
}

}  // namespace kvserve

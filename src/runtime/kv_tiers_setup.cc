#include "runtime/kv_tiers_setup.h"

#include <utility>

#include "kvtier/disk_kv_store.h"
#include "kvtier/kv_block_record.h"
#include "kvtier/redis_kv_store.h"

namespace kvserve {

uint64_t KvTierFingerprint(const LlamaModel& model, const VocabSpec* vocab,
                           const KvStorage& storage,
                           const std::function<void(int64_t, int64_t)>& progress) {
  FingerprintBuilder f;
  f.Add(std::string_view("kvserve KV tier v1"));
  const ModelConfig& c = model.config();
  f.Add(std::string_view(c.architecture));
  // Every setting that changes hidden states, and so the KV of later layers (not only the
  // weights' bytes: GGUF metadata such as the experts used per token or the RoPE scaling).
  for (int64_t v : {c.vocab_size, c.hidden_dim, c.ffn_dim, c.num_layers, c.num_heads,
                    c.num_kv_heads, c.head_dim, c.rope.head_dim, c.rope.rotary_dim,
                    static_cast<int64_t>(c.rope.layout), static_cast<int64_t>(c.rope.scaling),
                    c.rope.llama3_original_max_positions, c.rope.yarn_original_max_positions,
                    c.mla.q_lora_rank, c.mla.kv_lora_rank, c.mla.qk_rope_head_dim,
                    c.mla.qk_nope_head_dim, c.mla.v_head_dim,
                    static_cast<int64_t>(c.mla.split_kv_b), static_cast<int64_t>(c.qkv_bias),
                    static_cast<int64_t>(c.tied_embeddings), c.moe.num_experts,
                    c.moe.num_experts_used, c.moe.num_shared_experts, c.moe.expert_ffn_dim,
                    c.moe.first_dense_layers, static_cast<int64_t>(c.moe.gating),
                    static_cast<int64_t>(c.moe.selection_bias),
                    static_cast<int64_t>(c.moe.normalize_weights), c.moe.num_groups,
                    c.moe.num_groups_used, static_cast<int64_t>(c.causal)}) {
    f.Add(v);
  }
  for (float v : {c.norm_eps, c.rope.theta, c.rope.scaling_factor, c.rope.llama3_low_freq_factor,
                  c.rope.llama3_high_freq_factor, c.rope.yarn_beta_fast, c.rope.yarn_beta_slow,
                  c.mla.yarn_log_multiplier, c.moe.weights_scale}) {
    f.Add(&v, sizeof(v));
  }
  const LoadedModel& loaded = model.loaded();
  int64_t total = 0, done = 0;
  for (const auto& [name, t] : loaded.tensors) total += t.num_bytes();
  for (const auto& [name, t] : loaded.tensors) {  // std::map: name order
    f.Add(std::string_view(name));
    f.Add(static_cast<int64_t>(t.dtype));
    for (int64_t d : t.shape) f.Add(d);
    f.Add(t.data, static_cast<size_t>(t.num_bytes()));
    done += t.num_bytes();
    if (progress) progress(done, total);
  }
  if (vocab != nullptr) {
    f.Add(static_cast<int64_t>(vocab->tokens.size()));
    for (const std::string& s : vocab->tokens) f.Add(std::string_view(s));
    for (TokenType t : vocab->token_types) f.Add(static_cast<int64_t>(t));
    for (const std::string& s : vocab->merges) f.Add(std::string_view(s));
    f.Add(vocab->scores.data(), vocab->scores.size() * sizeof(float));
    f.Add(std::string_view(vocab->pre));
  }
  const KvCacheSpec& spec = storage.spec();
  for (int64_t v : {static_cast<int64_t>(spec.dtype), static_cast<int64_t>(spec.layout),
                    spec.block_size, spec.num_layers, spec.num_kv_heads, spec.head_dim,
                    spec.rope_dim, storage.block_bytes()}) {
    f.Add(v);
  }
  auto add_floats = [&](const std::vector<float>& v) {
    f.Add(static_cast<int64_t>(v.size()));
    f.Add(v.data(), v.size() * sizeof(float));
  };
  add_floats(storage.scales().k);
  add_floats(storage.scales().v);
  const int64_t norm_values = spec.num_kv_heads * spec.head_dim;
  for (int64_t layer = 0; layer < spec.num_layers && storage.has_channel_norm(); ++layer) {
    for (const float* p : {storage.key_channel_mean(layer), storage.key_channel_scale(layer),
                           storage.value_channel_mean(layer), storage.value_channel_scale(layer)}) {
      if (p != nullptr) f.Add(p, static_cast<size_t>(norm_values) * sizeof(float));
    }
  }
  return f.Digest();
}

StatusOr<std::unique_ptr<KvTierManager>> CreateKvTiers(
    const KvTierFlags& flags, uint64_t fingerprint, const KvStorage& storage,
    std::function<void(std::vector<KvCacheEvent>)> on_disk_events) {
  KvTierManagerOptions o;
  o.fingerprint = fingerprint;
  o.block_size = storage.spec().block_size;
  o.block_bytes = storage.block_bytes();
  if (!flags.offload_dir.empty()) {
    if (flags.offload_bytes <= 0) {
      return InvalidArgumentError("--kv-offload-dir needs --kv-offload-bytes (> 0)");
    }
    DiskKvStoreOptions d;
    d.dir = flags.offload_dir;
    d.fingerprint = fingerprint;
    d.max_bytes = flags.offload_bytes;
    o.on_disk_events = std::move(on_disk_events);
    KV_ASSIGN_OR_RETURN(o.disk, DiskKvStore::Open(d));
  } else if (flags.offload_bytes > 0) {
    return InvalidArgumentError("--kv-offload-bytes needs --kv-offload-dir");
  }
  if (!flags.redis_url.empty()) {
    if (flags.redis_ttl_seconds < 0) return InvalidArgumentError("--kv-redis-ttl must be >= 0");
    if (flags.redis_timeout_ms <= 0) {
      return InvalidArgumentError("--kv-redis-timeout-ms must be > 0");
    }
    RedisKvStoreOptions r;
    r.url = flags.redis_url;
    r.fingerprint = fingerprint;
    r.ttl_seconds = flags.redis_ttl_seconds;
    r.command_timeout_ms = flags.redis_timeout_ms;
    KV_ASSIGN_OR_RETURN(o.redis, RedisKvStore::Create(r));
    // Republish well within the TTL, so a block in use never expires from Redis.
    if (flags.redis_ttl_seconds > 0) {
      o.redis_republish_after = std::chrono::seconds(std::max<int64_t>(1, flags.redis_ttl_seconds / 2));
    }
  }
  if (flags.load_timeout_ms < 0) {
    return InvalidArgumentError("--kv-tier-load-timeout-ms must be >= 0");
  }
  return KvTierManager::Create(std::move(o));
}

}  // namespace kvserve

// OpenAiServer::RenderMetrics: the /metrics document (Prometheus text format) from the engine's
// stats snapshot and the server's own counters. See docs/serving.md for what each metric means.
#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "base/str_format.h"
#include "server/server.h"

namespace kvserve {

namespace {

// The KV tiers beyond memory (--kv-offload-dir, --kv-redis): which tier served each cached
// prompt token, and each tier's traffic, latency, failures and occupancy.
void WriteKvTierMetrics(const EngineStats& st, const KvTierStats& tiers, PrometheusWriter* w) {
  const KvTierEngineStats& e = st.kv_tier_engine;
  w->family("prefix_cache_tier_hit_tokens_total", "counter",
            "Prompt tokens served from the prefix cache, by the tier that held them when the "
            "request arrived: memory, disk (--kv-offload-dir), redis (--kv-redis). Recomputed "
            "tokens are prefix_cache_miss_tokens_total.");
  for (int t = 0; t < kNumKvTiers; ++t) {
    w->sample("prefix_cache_tier_hit_tokens_total", static_cast<double>(e.hit_tokens[t]),
              {{"tier", KvTierName(static_cast<KvTier>(t))}});
  }
  struct Family {
    const char* name;
    const char* type;
    const char* help;
    double (*value)(const KvTierCounters&);
  };
  static const Family kFamilies[] = {
      {"kv_tier_blocks_written_total", "counter", "Blocks written to the tier (write-through).",
       [](const KvTierCounters& c) { return static_cast<double>(c.blocks_written); }},
      {"kv_tier_written_bytes_total", "counter", "Bytes written to the tier.",
       [](const KvTierCounters& c) { return static_cast<double>(c.bytes_written); }},
      {"kv_tier_write_errors_total", "counter",
       "Writes that failed (disk full, Redis down or slow); the block stays in memory only.",
       [](const KvTierCounters& c) { return static_cast<double>(c.write_errors); }},
      {"kv_tier_writes_dropped_total", "counter",
       "Blocks not written because the tier's write queue was full.",
       [](const KvTierCounters& c) { return static_cast<double>(c.writes_dropped); }},
      {"kv_tier_blocks_read_total", "counter", "Blocks read back and verified.",
       [](const KvTierCounters& c) { return static_cast<double>(c.blocks_read); }},
      {"kv_tier_read_bytes_total", "counter", "Bytes read back and verified.",
       [](const KvTierCounters& c) { return static_cast<double>(c.bytes_read); }},
      {"kv_tier_read_seconds_total", "counter",
       "Seconds spent reading and verifying blocks (on the tier's thread, not the engine's).",
       [](const KvTierCounters& c) { return c.read_seconds; }},
      {"kv_tier_lookups_total", "counter", "Lookups of a prompt's blocks in the tier.",
       [](const KvTierCounters& c) { return static_cast<double>(c.lookups); }},
      {"kv_tier_corrupt_blocks_total", "counter",
       "Blocks that failed verification (checksum, size, model fingerprint, tokens): dropped "
       "from the tier and recomputed.",
       [](const KvTierCounters& c) { return static_cast<double>(c.corrupt_blocks); }},
      {"kv_tier_read_errors_total", "counter", "Lookups that could not reach the tier.",
       [](const KvTierCounters& c) { return static_cast<double>(c.read_errors); }},
      {"kv_tier_available", "gauge", "1 while the tier answered its last request.",
       [](const KvTierCounters& c) { return c.available ? 1.0 : 0.0; }},
      {"kv_tier_queued_write_bytes", "gauge", "Bytes waiting to be written to the tier.",
       [](const KvTierCounters& c) { return static_cast<double>(c.queued_write_bytes); }},
  };
  for (const Family& f : kFamilies) {
    w->family(f.name, f.type, f.help);
    for (KvTier t : {KvTier::kDisk, KvTier::kRedis}) {
      const KvTierCounters& c = tiers.tiers[static_cast<int>(t)];
      if (c.enabled) w->sample(f.name, f.value(c), {{"tier", KvTierName(t)}});
    }
  }
  for (const auto& [name, help, which] :
       {std::tuple{"kv_tier_block_read_seconds",
                   "Seconds per block read back and verified, by tier (a lookup's time over its "
                   "blocks, on the tier's thread).",
                   &KvTierCounters::block_read_seconds},
        std::tuple{"kv_tier_block_write_seconds",
                   "Seconds per block written, by tier (on the tier's writer thread).",
                   &KvTierCounters::block_write_seconds}}) {
    w->family(name, "histogram", help);
    for (KvTier t : {KvTier::kDisk, KvTier::kRedis}) {
      const KvTierCounters& c = tiers.tiers[static_cast<int>(t)];
      if (!c.enabled) continue;
      const KvTierLatency& h = c.*which;
      int64_t cumulative = 0;
      for (int b = 0; b < KvTierLatency::kNumBuckets; ++b) {
        cumulative += h.counts[b];
        const std::string le = b + 1 < KvTierLatency::kNumBuckets
                                   ? StrFormat("%g", KvTierLatency::kBounds[b])
                                   : std::string("+Inf");
        w->sample(std::string(name) + "_bucket", static_cast<double>(cumulative),
                  {{"tier", KvTierName(t)}, {"le", le}});
      }
      w->sample(std::string(name) + "_sum", h.sum, {{"tier", KvTierName(t)}});
      w->sample(std::string(name) + "_count", static_cast<double>(h.count),
                {{"tier", KvTierName(t)}});
    }
  }
  const KvTierCounters& disk = tiers.tiers[static_cast<int>(KvTier::kDisk)];
  if (disk.enabled) {
    w->single("kv_tier_disk_blocks", "gauge", "Blocks in the disk tier now.",
              static_cast<double>(disk.stored_blocks));
    w->single("kv_tier_disk_bytes", "gauge",
              "Bytes of the disk tier's files now (at most --kv-offload-bytes).",
              static_cast<double>(disk.stored_bytes));
  }
  w->family("kv_tier_blocks_imported_total", "counter",
            "Blocks loaded from a tier and copied into the memory tier for a waiting request.");
  for (KvTier t : {KvTier::kDisk, KvTier::kRedis}) {
    if (!tiers.tiers[static_cast<int>(t)].enabled) continue;
    w->sample("kv_tier_blocks_imported_total",
              static_cast<double>(e.blocks_imported[static_cast<int>(t)]),
              {{"tier", KvTierName(t)}});
  }
  w->single("kv_tier_loads_total", "counter",
            "Loads started for waiting requests whose prompt continues into a tier.",
            static_cast<double>(tiers.loads));
  w->single("kv_tier_loads_with_hits_total", "counter", "Loads that found at least one block.",
            static_cast<double>(tiers.loads_with_hits));
  w->single("kv_tier_load_seconds_total", "counter",
            "Seconds from a load's start to its end, summed (the request waits this long).",
            tiers.load_seconds_total);
  w->single("kv_tier_loads_timed_out_total", "counter",
            "Loads not done within --kv-tier-load-timeout-ms: the request recomputed.",
            static_cast<double>(e.loads_timed_out));
  w->single("kv_tier_import_seconds_total", "counter",
            "Engine-thread seconds copying loaded blocks into the memory tier.",
            e.import_seconds);
  w->single("kv_tier_offer_seconds_total", "counter",
            "Engine-thread seconds copying new blocks out for write-through.", e.offer_seconds);
}

}  // namespace

std::string OpenAiServer::RenderMetrics() const {
  // Embeddings-only servers have no engine: its metrics read zero.
  const EngineStats st = engine_ != nullptr ? engine_->stats() : EngineStats{};
  PrometheusWriter w("kvserve:");
  const KvCacheInfo& kv = options_.kv;
  w.single("num_requests_running", "gauge", "Requests in the running batch (holding KV blocks).",
           static_cast<double>(st.num_running));
  w.single("num_requests_waiting", "gauge",
           "Requests waiting to be scheduled (including preempted ones).",
           static_cast<double>(st.num_waiting));
  w.single("num_requests_in_flight", "gauge",
           "Engine requests admitted by the HTTP server and not finished (running + waiting + "
           "being admitted); 503 above max-num-seqs + max-queue-len.",
           static_cast<double>(in_flight_.load()));
  const double num_blocks = static_cast<double>(std::max<int64_t>(1, st.num_blocks));
  w.single("kv_cache_usage_perc", "gauge",
           "Fraction of KV blocks held by running requests (1 = full), as vLLM's.",
           static_cast<double>(st.blocks_in_use) / num_blocks);
  w.single("kv_cache_resident_perc", "gauge",
           "Fraction of KV blocks holding data: held by running requests or resident in the "
           "prefix cache only (reusable, evictable).",
           static_cast<double>(st.blocks_in_use + st.blocks_cached) / num_blocks);
  w.single("kv_cache_fragmentation_perc", "gauge",
           "Fraction of the token slots in blocks held by running requests that hold no token "
           "(partly filled last blocks).",
           st.memory.fragmentation_perc / 100.0);
  w.single("kv_cache_capacity_tokens", "gauge", "Tokens the KV cache can hold (blocks x block size).",
           static_cast<double>(kv.num_blocks * kv.block_size));
  w.single("kv_cache_capacity_bytes", "gauge", "Bytes of KV cache pages.",
           static_cast<double>(kv.num_blocks * kv.block_size * kv.bytes_per_token));
  w.single("kv_cache_bytes_per_token", "gauge",
           "KV bytes one token holds over all layers (values and int8 scales), as `kvserve plan` "
           "computes them.",
           static_cast<double>(kv.bytes_per_token));
  w.family("kv_cache_layout_info", "gauge",
           "The KV cache's layout (separate_kv: K and V per KV head; mla_latent: one latent row "
           "per token and layer) and values per token and layer (value 1).");
  w.sample("kv_cache_layout_info", 1.0,
           {{"layout", kv.layout},
            {"values_per_token_per_layer", std::to_string(kv.values_per_token_per_layer)}});
  w.family("simd_level_info", "gauge",
           "The instruction-set level the kernels run at (scalar, avx2, avx512; KVSERVE_SIMD "
           "picks a lower one), the best this CPU has, and whether f16 weights run as bf16 "
           "(KVSERVE_F16_AS_BF16=1) (value 1).");
  w.sample("simd_level_info", 1.0,
           {{"level", options_.simd_level},
            {"cpu", options_.cpu_simd_level},
            {"f16_as_bf16", options_.f16_weights_as_bf16 ? "1" : "0"}});
  w.single("kv_cache_blocks", "gauge", "KV blocks in the pool.", static_cast<double>(st.num_blocks));
  w.family("kv_cache_blocks_by_state", "gauge",
           "KV blocks by state: in_use (held by requests), cached (only the prefix cache), free.");
  w.sample("kv_cache_blocks_by_state", static_cast<double>(st.blocks_in_use), {{"state", "in_use"}});
  w.sample("kv_cache_blocks_by_state", static_cast<double>(st.blocks_cached), {{"state", "cached"}});
  w.sample("kv_cache_blocks_by_state", static_cast<double>(st.kv.blocks_free), {{"state", "free"}});

  w.single("prefix_cache_queries_total", "counter",
           "Prompt tokens looked up in the prefix cache (one lookup per admitted request).",
           static_cast<double>(st.kv.prefix_queries_tokens));
  w.single("prefix_cache_hits_total", "counter",
           "Prompt tokens served from the prefix cache (their prefill was skipped).",
           static_cast<double>(st.kv.prefix_hits_tokens));
  w.single("prefix_cache_hit_rate", "gauge",
           "Prompt tokens served from the prefix cache over prompt tokens, for the most recent " +
               std::to_string(metrics_.recent_hit_rate.window_requests()) +
               " finished requests (kept while the server is idle).",
           metrics_.recent_hit_rate.rate());
  w.family("prefix_cache_miss_tokens_total", "counter",
           "Prompt tokens not served from the prefix cache, by reason: never_seen, evicted, "
           "other_namespace (a different model or cache_salt), partial_block (the prompt's "
           "last, partly filled block), last_token (always recomputed to get logits).");
  for (int r = 0; r < kNumPrefixMissReasons; ++r) {
    w.sample("prefix_cache_miss_tokens_total", static_cast<double>(st.kv.miss_tokens[r]),
             {{"reason", PrefixMissReasonName(static_cast<PrefixMissReason>(r))}});
  }
  w.single("prefix_cache_evicted_blocks_total", "counter",
           "Blocks evicted from the prefix cache (least recently used first) to make room.",
           static_cast<double>(st.kv.evicted_blocks));
  w.single("prefix_cache_deferrals_total", "counter",
           "Times a waiting request was held back for a step because a running request was "
           "computing the next blocks of its prompt (it then reuses them instead of computing "
           "them twice).",
           static_cast<double>(st.num_prefix_deferrals_total));
  w.single("prefix_cache_resident_blocks", "gauge",
           "Blocks in the prefix cache's tree (in use or not).",
           static_cast<double>(st.kv.blocks_in_prefix_cache));
  w.single("num_preemptions_total", "counter",
           "Requests preempted (KV freed, recomputed later) because blocks ran out.",
           static_cast<double>(st.num_preemptions_total));
  w.single("prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
           static_cast<double>(st.num_prompt_tokens_total));
  w.single("generation_tokens_total", "counter", "Tokens generated.",
           static_cast<double>(st.num_generated_tokens_total));
  w.single("engine_steps_total", "counter", "Engine steps (one batched forward pass each).",
           static_cast<double>(st.num_steps));

  w.family("request_success_total", "counter",
           "Finished engine requests by finish reason (stop, length, abort, error).");
  const std::map<std::string, int64_t> finished = metrics_.finished();
  for (const char* reason : {"stop", "length", "abort", "error"}) {
    auto it = finished.find(reason);
    w.sample("request_success_total", it == finished.end() ? 0.0 : static_cast<double>(it->second),
             {{"finished_reason", reason}});
  }
  w.family("http_errors_total", "counter", "HTTP responses with an error status, by status.");
  for (const auto& [status, count] : metrics_.http_errors()) {
    w.sample("http_errors_total", static_cast<double>(count), {{"status", std::to_string(status)}});
  }

  w.family("time_to_first_token_seconds", "histogram",
           "Time from a request's arrival to its first output token.");
  metrics_.time_to_first_token_seconds.write(&w, "time_to_first_token_seconds");
  w.family("inter_token_latency_seconds", "histogram", "Time between consecutive output tokens.");
  metrics_.inter_token_latency_seconds.write(&w, "inter_token_latency_seconds");
  w.family("e2e_request_latency_seconds", "histogram",
           "Time from a request's arrival to its last output.");
  metrics_.e2e_request_latency_seconds.write(&w, "e2e_request_latency_seconds");
  w.family("request_queue_time_seconds", "histogram",
           "Time a request waited before it was first scheduled.");
  metrics_.request_queue_time_seconds.write(&w, "request_queue_time_seconds");
  w.family("request_prompt_tokens", "histogram", "Prompt tokens per finished request.");
  metrics_.request_prompt_tokens.write(&w, "request_prompt_tokens");
  w.family("request_generation_tokens", "histogram", "Generated tokens per finished request.");
  metrics_.request_generation_tokens.write(&w, "request_generation_tokens");
  w.family("prompt_divergence_tokens", "histogram",
           "Per request at admission, by prefix-cache namespace (default, or salt- and a hash of "
           "the cache_salt; at most 64, then other): the prompt tokens its best cached match "
           "covered, i.e. where the prompt first diverges from what the cache holds (whole "
           "blocks). Many requests low here while they share content later: run kvserve "
           "prompt-lint on them.");
  metrics_.prompt_divergence_tokens.write(&w, "prompt_divergence_tokens");

  w.family("kv_tokens_evicted_total", "counter",
           "Tokens whose KV token eviction dropped (mean over layers and KV heads), by method.");
  for (const auto& [method, tokens] : metrics_.kv_tokens_evicted()) {
    w.sample("kv_tokens_evicted_total", static_cast<double>(tokens), {{"method", method}});
  }
  w.family("request_kv_kept_fraction", "histogram",
           "Per finished request with token eviction: the fraction of its computed tokens whose "
           "KV was still held at the end.");
  metrics_.request_kv_kept_fraction.write(&w, "request_kv_kept_fraction");

  w.family("kv_cache_scale_info", "gauge",
           "The KV cache's dtype and where its quantization scales come from (value 1).");
  w.sample("kv_cache_scale_info", 1.0,
           {{"kv_cache_dtype", kv.dtype},
            {"block_size", std::to_string(kv.block_size)},
            {"scale_source", KvScaleSourceName(kv.scales.source)},
            {"scale_detail", kv.scales.detail},
            {"granularity", kv.dtype == "int8" ? "per token and KV head (dynamic)"
                            : kv.scales.k.empty() ? "none"
                                                  : "per layer and KV head (fixed)"}});
  if (!kv.scales.k.empty() && kv.num_kv_heads > 0) {
    w.family("kv_cache_scale", "gauge",
             "fp8 KV scale per layer (largest over its KV heads): real value = stored x scale.");
    for (int64_t l = 0; l < kv.num_layers; ++l) {
      float k_max = 0.0f, v_max = 0.0f;
      for (int64_t h = 0; h < kv.num_kv_heads; ++h) {
        const size_t i = static_cast<size_t>(l * kv.num_kv_heads + h);
        if (i < kv.scales.k.size()) k_max = std::max(k_max, kv.scales.k[i]);
        if (i < kv.scales.v.size()) v_max = std::max(v_max, kv.scales.v[i]);
      }
      w.sample("kv_cache_scale", k_max, {{"layer", std::to_string(l)}, {"tensor", "k"}});
      w.sample("kv_cache_scale", v_max, {{"layer", std::to_string(l)}, {"tensor", "v"}});
    }
  }
  if (options_.response_cache.cache != nullptr) {
    const ServerMetrics::CacheCounters cc = metrics_.cache_counters();
    const semcache::SemanticCacheStats cs = options_.response_cache.cache->stats();
    w.family("semantic_cache_lookups_total", "counter",
             "Response-cache (tier 1) lookups by result: miss, exact (a repeat of a stored "
             "request), semantic (similar enough and not vetoed).");
    for (const char* result : {"miss", "exact", "semantic"}) {
      auto it = cc.lookups.find(result);
      w.sample("semantic_cache_lookups_total", it == cc.lookups.end() ? 0.0 : static_cast<double>(it->second),
               {{"result", result}});
    }
    w.single("semantic_cache_vetoes_total", "counter",
             "Lookups where a candidate above the threshold was refused because its numbers, "
             "capitalised names or negations differ.",
             static_cast<double>(cc.vetoes));
    w.single("semantic_cache_stores_total", "counter", "Finished responses stored.",
             static_cast<double>(cc.stores));
    w.single("semantic_cache_time_saved_seconds_total", "counter",
             "Generation time of the stored responses served from the cache.", cc.seconds_saved);
    w.family("semantic_cache_hit_similarity", "histogram",
             "Cosine similarity of semantic hits to the stored request.");
    metrics_.cache_hit_similarity.write(&w, "semantic_cache_hit_similarity");
    w.family("semantic_cache_miss_similarity", "histogram",
             "Cosine similarity of the closest stored request on semantic misses (near misses "
             "just under the threshold show whether it is too strict).");
    metrics_.cache_miss_similarity.write(&w, "semantic_cache_miss_similarity");
    w.single("semantic_cache_entries", "gauge", "Responses in the cache.",
             static_cast<double>(cs.entries));
    w.single("semantic_cache_scopes", "gauge",
             "Distinct scopes (model, tenant, system prompt, tools, format, sampling) holding "
             "entries.",
             static_cast<double>(cs.scopes));
    w.single("semantic_cache_bytes", "gauge",
             "Bytes the cache holds (texts, responses, embeddings, index), estimated.",
             static_cast<double>(cs.bytes));
    w.single("semantic_cache_evictions_total", "counter",
             "Entries dropped by the LRU bound (--semantic-cache-max-entries).",
             static_cast<double>(cs.evictions));
    w.single("semantic_cache_expirations_total", "counter",
             "Entries dropped by the TTL (--semantic-cache-ttl).",
             static_cast<double>(cs.expirations));
  }
  if (options_.kv_events != nullptr) {
    const KvEventPublisher::Stats ks = options_.kv_events->stats();
    w.single("kv_events_batches_published_total", "counter",
             "KV event batches (one per engine step that changed the prefix cache) published "
             "(--kv-events-config).",
             static_cast<double>(ks.batches_published));
    w.single("kv_events_published_total", "counter",
             "KV events (BlockStored, BlockRemoved, AllBlocksCleared) published.",
             static_cast<double>(ks.events_published));
    w.single("kv_events_batches_dropped_total", "counter",
             "KV event batches dropped because the publisher's queue was full (max_queue_size).",
             static_cast<double>(ks.batches_dropped));
    w.single("kv_events_replays_total", "counter", "Replay requests answered.",
             static_cast<double>(ks.replays_served));
  }
  if (options_.kv_tiers != nullptr) WriteKvTierMetrics(st, options_.kv_tiers->stats(), &w);
  if (options_.embedder != nullptr) {
    const ServerMetrics::EmbeddingCounters ec = metrics_.embedding_counters();
    w.single("embedding_requests_total", "counter", "/v1/embeddings requests answered.",
             static_cast<double>(ec.requests));
    w.single("embedding_inputs_total", "counter", "Inputs embedded for /v1/embeddings.",
             static_cast<double>(ec.inputs));
    w.single("embedding_prompt_tokens_total", "counter",
             "Tokens embedded for /v1/embeddings ([CLS] and [SEP] included).",
             static_cast<double>(ec.tokens));
    w.single("embedding_seconds_total", "counter",
             "Seconds the embedding model ran for /v1/embeddings.", ec.seconds);
    w.single("semantic_cache_embeddings_total", "counter",
             "Response-cache keys embedded for semantic lookups.",
             static_cast<double>(ec.cache_keys));
    w.single("semantic_cache_embedding_tokens_total", "counter",
             "Tokens of the response-cache keys embedded.", static_cast<double>(ec.cache_tokens));
    w.single("semantic_cache_embedding_seconds_total", "counter",
             "Seconds the embedding model ran for response-cache keys.", ec.cache_seconds);
  }
  w.single("structured_output_tokens_total", "counter",
           "Tokens sampled under a structured-output grammar (response_format, guided_*, "
           "grammar, forced tool calls).",
           static_cast<double>(st.grammar_tokens_total));
  w.single("structured_output_mask_seconds_total", "counter",
           "Engine-thread seconds spent computing and applying grammar token masks and "
           "advancing grammar states.",
           st.grammar_seconds_total);
  w.single("kv_cache_clipped_values_total", "counter",
           "Quantized KV values that saturated at the format's largest value (fp8).",
           static_cast<double>(st.clipped_values_total));
  return w.text();
}

}  // namespace kvserve

#include "runtime/kv_tier_connector.h"

#include <algorithm>
#include <string>
#include <utility>

#include "base/check.h"

namespace kvserve {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

KvTierConnector::KvTierConnector(KvTierManager* manager, int64_t block_size,
                                 std::chrono::milliseconds load_timeout)
    : manager_(manager), block_size_(block_size), load_timeout_(load_timeout) {
  KV_CHECK(manager_ != nullptr);
}

void KvTierConnector::before_schedule(Scheduler* scheduler, KvCacheManager* kv,
                                      KvStorage* storage) {
  if (!kv->prefix_caching_enabled()) return;
  for (KvTierLoadResult& loaded : manager_->TakeLoaded()) {
    import(&loaded, scheduler, kv, storage);
  }
  const Clock::time_point now = Clock::now();
  for (auto it = states_.begin(); it != states_.end();) {
    const Request* r = scheduler->request(it->first);
    if (r == nullptr) {  // finished or aborted without an output we saw
      it = states_.erase(it);
      continue;
    }
    if (it->second.loading && now >= it->second.deadline) {
      // Not ready in time: the request recomputes; the load's result is dropped when it comes.
      it->second.loading = false;
      scheduler->set_held(it->first, false);
      ++stats_.loads_timed_out;
    }
    ++it;
  }
  for (SeqId id : scheduler->waiting_ids()) {
    if (states_.count(id) != 0) continue;
    start_load(*scheduler->request(id), scheduler, kv);
  }
}

void KvTierConnector::start_load(const Request& request, Scheduler* scheduler,
                                 KvCacheManager* kv) {
  const Request* r = &request;
  State& st = states_[r->id()];
  const int64_t bs = block_size_;
  const PrefixMatch match =
      kv->match(r->cache_namespace(), r->all_token_ids(), scheduler->max_cached_tokens(*r));
  const int64_t first = match.num_cached_tokens / bs;
  // The blocks a hit could cover: whole blocks, never the last token, none a prompt-logits
  // position (as KvCacheManager::match).
  const int64_t end = std::min((r->num_tokens() - 1) / bs,
                               std::max<int64_t>(scheduler->max_cached_tokens(*r), 0) / bs);
  if (end <= first) return;
  const std::vector<uint64_t>& keys = scheduler->block_hashes(r->id(), end);
  if (!manager_->may_have(keys[static_cast<size_t>(first)])) return;
  KvTierLoadRequest load;
  load.id = r->id();
  load.first_block = first;
  const std::vector<TokenId>& tokens = r->all_token_ids();
  for (int64_t b = first; b < end; ++b) {
    KvTierBlock block;
    block.key = keys[static_cast<size_t>(b)];
    block.parent_key = b > 0 ? keys[static_cast<size_t>(b - 1)] : 0;
    block.tokens.assign(tokens.begin() + b * bs, tokens.begin() + (b + 1) * bs);
    load.blocks.push_back(std::move(block));
  }
  st.loading = true;
  st.deadline = Clock::now() + load_timeout_;
  load.deadline = st.deadline;
  manager_->StartLoad(std::move(load));
  st.load_first_block = first;
  scheduler->set_held(r->id(), true);
}

void KvTierConnector::import(KvTierLoadResult* loaded, Scheduler* scheduler, KvCacheManager* kv,
                             KvStorage* storage) {
  auto it = states_.find(loaded->id);
  const Request* r = scheduler->request(loaded->id);
  // A load that timed out is still used if its request has not started yet.
  const bool waiting = r != nullptr && (r->status() == RequestStatus::kWaiting ||
                                        r->status() == RequestStatus::kPreempted);
  if (it == states_.end() || !waiting ||
      it->second.load_first_block != loaded->load_first_block) {
    stats_.loads_discarded += loaded->last;
    manager_->Recycle(std::move(loaded->payloads));
    return;
  }
  State& st = it->second;
  if (loaded->num_blocks() > 0) {
    const Clock::time_point start = Clock::now();
    int64_t first_added = 0;
    // Skips what memory already holds; adds nothing when the blocks before the chunk are gone
    // (a short earlier chunk, an eviction meanwhile); stops early when the pool runs short.
    const int64_t added = kv->import_blocks(
        r->cache_namespace(), r->all_token_ids(), loaded->first_block, loaded->num_blocks(),
        [&](BlockId block, int64_t index) {
          storage->CopyBlockIn(block, reinterpret_cast<const uint8_t*>(
                                          loaded->payloads[static_cast<size_t>(index)].data()));
        },
        &first_added);
    stats_.import_seconds += std::chrono::duration<double>(Clock::now() - start).count();
    for (int64_t b = first_added; b < first_added + added; ++b) {
      const KvTier tier = loaded->tiers[static_cast<size_t>(b - loaded->first_block)];
      st.imported.push_back({b, tier});
      ++stats_.blocks_imported[static_cast<int>(tier)];
    }
  }
  manager_->Recycle(std::move(loaded->payloads));
  if (loaded->last) {
    if (st.loading) scheduler->set_held(loaded->id, false);
    st.loading = false;
  }
}

void KvTierConnector::after_schedule(const SchedulerOutput& out, const Scheduler& scheduler) {
  for (const ScheduledSeq& s : out.seqs) {
    auto it = states_.find(s.id);
    if (it == states_.end() || it->second.counted) continue;
    const Request* r = scheduler.request(s.id);
    if (r == nullptr || r->status() != RequestStatus::kRunning) continue;
    State& st = it->second;
    st.counted = true;  // the first admission: what OpenAI's cached_tokens reports
    const int64_t cached_blocks = r->num_cached_prompt_tokens() / block_size_;
    for (const auto& [block, tier] : st.imported) {
      if (block < cached_blocks) st.by_tier[static_cast<int>(tier)] += block_size_;
    }
    for (KvTier t : {KvTier::kDisk, KvTier::kRedis}) {
      stats_.hit_tokens[static_cast<int>(t)] += st.by_tier[static_cast<int>(t)];
    }
  }
}

void KvTierConnector::after_update(KvCacheManager* kv, const KvStorage& storage,
                                   std::vector<RequestOutput>* outputs) {
  const Clock::time_point start = Clock::now();
  int64_t offered = 0;
  for (StoredKvBlock& b : kv->take_stored_blocks()) {
    if (!manager_->wants(b.key)) continue;
    manager_->Offer({b.key, b.parent_key, std::move(b.tokens)},
                    [&](uint8_t* payload) { storage.CopyBlockOut(b.block, payload); });
    ++offered;
  }
  if (offered > 0) {
    stats_.blocks_offered += offered;
    stats_.offer_seconds += std::chrono::duration<double>(Clock::now() - start).count();
  }
  for (RequestOutput& o : *outputs) {
    auto it = states_.find(o.id);
    int64_t other = 0;
    if (it != states_.end()) {
      for (KvTier t : {KvTier::kDisk, KvTier::kRedis}) {
        const int i = static_cast<int>(t);
        o.num_cached_prompt_tokens_by_tier[i] = it->second.by_tier[i];
        other += it->second.by_tier[i];
      }
      if (o.finished()) states_.erase(it);
    }
    o.num_cached_prompt_tokens_by_tier[static_cast<int>(KvTier::kMemory)] =
        std::max<int64_t>(0, o.num_cached_prompt_tokens - other);
  }
}

}  // namespace kvserve

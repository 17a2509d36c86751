#include "runtime/request.h"

#include <algorithm>
#include <span>
#include <utility>

#include "base/check.h"
#include "kv/radix_cache.h"

namespace kvserve {

const char* RequestStatusName(RequestStatus status) {
  switch (status) {
    case RequestStatus::kWaiting: return "waiting";
    case RequestStatus::kRunning: return "running";
    case RequestStatus::kPreempted: return "preempted";
    case RequestStatus::kFinished: return "finished";
  }
  return "?";
}

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "?";
}

Request::Request(SeqId id, RequestInput input, int64_t arrival_seq, std::string cache_namespace)
    : id_(id),
      input_(std::move(input)),
      arrival_seq_(arrival_seq),
      arrival_time_(std::chrono::steady_clock::now()),
      cache_namespace_(std::move(cache_namespace)),
      all_token_ids_(input_.prompt_ids),
      prompt_logits_next_(std::max<int64_t>(input_.prompt_logits_start, 0)) {}

const std::vector<uint64_t>& Request::block_hashes(int64_t num_blocks, int64_t block_size) {
  KV_CHECK_LE(num_blocks * block_size, num_tokens());
  if (static_cast<int64_t>(block_hashes_.size()) >= num_blocks) return block_hashes_;
  if (block_hashes_.empty()) block_chain_ = kPrefixChainSeed;
  const uint64_t ns_key = NamespaceKey(cache_namespace_);
  const std::span<const TokenId> tokens(all_token_ids_);
  for (auto b = static_cast<int64_t>(block_hashes_.size()); b < num_blocks; ++b) {
    block_chain_ = ExtendPrefixChain(
        block_chain_, tokens.subspan(static_cast<size_t>(b * block_size),
                                     static_cast<size_t>(block_size)));
    block_hashes_.push_back(PrefixBlockKey(ns_key, block_chain_));
  }
  return block_hashes_;
}

void Request::set_held(bool held) {
  KV_CHECK(status_ == RequestStatus::kWaiting || status_ == RequestStatus::kPreempted || !held)
      << "request " << id_ << " held while " << RequestStatusName(status_);
  held_ = held;
}

void Request::start_running(int64_t num_cached_tokens) {
  KV_CHECK(status_ == RequestStatus::kWaiting || status_ == RequestStatus::kPreempted)
      << "request " << id_ << " started while " << RequestStatusName(status_);
  KV_CHECK(0 <= num_cached_tokens && num_cached_tokens < num_tokens());
  if (status_ == RequestStatus::kWaiting) {
    num_cached_prompt_tokens_ = std::min(num_cached_tokens, num_prompt_tokens());
  }
  KV_CHECK(!held_) << "request " << id_ << " started while held";
  status_ = RequestStatus::kRunning;
  num_computed_tokens_ = num_cached_tokens;
  num_cached_tokens_ = num_cached_tokens;
}

void Request::preempt() {
  KV_CHECK(status_ == RequestStatus::kRunning) << "request " << id_;
  status_ = RequestStatus::kPreempted;
  num_computed_tokens_ = 0;
  num_cached_tokens_ = 0;
  num_dropped_slots_ = 0;  // recomputed (and compressed again) from scratch
  num_evicted_tokens_ = 0;
  kv_layer_key_begin_.clear();
  ++num_preemptions_;
}

void Request::compacted(int64_t num_kv_slots, std::vector<int64_t> layer_key_begin,
                        int64_t num_evicted_tokens) {
  KV_CHECK(status_ == RequestStatus::kRunning) << "request " << id_;
  KV_CHECK(num_kv_slots >= 1 && num_kv_slots <= this->num_kv_slots())
      << "request " << id_ << " compacted to " << num_kv_slots << " of "
      << this->num_kv_slots() << " slots";
  KV_CHECK_GE(num_evicted_tokens, 0);
  num_dropped_slots_ = num_computed_tokens_ - num_kv_slots;
  num_evicted_tokens_ += num_evicted_tokens;
  kv_layer_key_begin_ = std::move(layer_key_begin);
}

void Request::advance_computed(int64_t num_new_tokens) {
  KV_CHECK(status_ == RequestStatus::kRunning) << "request " << id_;
  KV_CHECK_GE(num_new_tokens, 1);
  num_computed_tokens_ += num_new_tokens;
  KV_CHECK_LE(num_computed_tokens_, num_tokens()) << "request " << id_;
}

void Request::advance_prompt_logits(int64_t position) {
  KV_CHECK_LE(position, num_computed_tokens_) << "request " << id_;
  prompt_logits_next_ = std::max(prompt_logits_next_, position);
}

void Request::append_output_token(TokenId token) {
  KV_CHECK(status_ == RequestStatus::kRunning) << "request " << id_;
  output_ids_.push_back(token);
  all_token_ids_.push_back(token);
}

void Request::set_stop_token(TokenId token) { stop_token_id_ = token; }

void Request::finish(FinishReason reason) {
  KV_CHECK(reason != FinishReason::kNone && status_ != RequestStatus::kFinished);
  status_ = RequestStatus::kFinished;
  finish_reason_ = reason;
}

}  // namespace kvserve

#include "runtime/model_runner.h"

#include <algorithm>
#include <string>

#include "base/check.h"
#include "model/forward_batch.h"

namespace kvserve {

ModelRunner::ModelRunner(LlamaModel* model, KvStorage* storage, ThreadPool* pool)
    : model_(model), storage_(storage), pool_(pool) {
  KV_CHECK(model_ != nullptr && storage_ != nullptr);
}

StatusOr<ModelOutput> ModelRunner::execute(const SchedulerOutput& out, const Scheduler& scheduler,
                                           const KvCacheManager& kv) {
  for (SeqId id : out.finished_ids) samplers_.erase(id);
  ModelOutput result;
  if (out.seqs.empty()) return result;

  ForwardBatch batch;
  std::vector<const ScheduledSeq*> sampling;  // in logits row order
  for (const ScheduledSeq& s : out.seqs) {
    const Request* r = scheduler.request(s.id);
    KV_CHECK(r != nullptr) << "scheduled request " << s.id << " is unknown";
    const std::vector<TokenId>& tokens = r->all_token_ids();
    KV_CHECK(s.num_computed_tokens + s.num_new_tokens <= r->num_tokens());
    batch.AddSequence(tokens.data() + s.num_computed_tokens, s.num_new_tokens,
                      s.num_computed_tokens, kv.block_table(s.id));
    if (s.samples) {
      sampling.push_back(&s);
    } else {
      batch.logits_indices.pop_back();  // a prefill chunk that does not reach the end
    }
  }

  const int64_t vocab = model_->config().vocab_size;
  // At least one row, so that data() is valid when no sequence samples (all prefill chunks).
  logits_.resize(static_cast<size_t>(std::max<int64_t>(1, batch.num_logits()) * vocab));
  KV_RETURN_IF_ERROR(model_->Forward(batch, storage_, pool_, logits_.data()));

  for (size_t i = 0; i < sampling.size(); ++i) {
    const ScheduledSeq& s = *sampling[i];
    const Request* r = scheduler.request(s.id);
    auto it = samplers_.find(s.id);
    if (it == samplers_.end()) {
      it = samplers_.emplace(s.id, std::make_unique<Sampler>(r->input().sampling)).first;
    }
    float* row = logits_.data() + static_cast<int64_t>(i) * vocab;
    const int32_t num_logprobs = r->input().logprobs;
    if (num_logprobs >= 0) raw_row_.assign(row, row + vocab);  // Sample() changes the row
    const TokenId token = it->second->Sample(row, vocab, r->prompt_ids(), r->output_ids());
    result.sampled[s.id] = token;
    if (num_logprobs >= 0) {
      result.logprobs[s.id] = ComputeLogprobs(raw_row_.data(), vocab, token, num_logprobs);
    }
  }
  return result;
}

}  // namespace kvserve

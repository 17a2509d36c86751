#include "runtime/model_runner.h"

#include <algorithm>
#include <string>

#include "base/check.h"
#include "model/forward_batch.h"

namespace kvserve {

ModelRunner::ModelRunner(LlamaModel* model, KvStorage* storage, ThreadPool* pool,
                         std::shared_ptr<const grammar::TokenTrie> grammar_vocabulary)
    : model_(model),
      storage_(storage),
      pool_(pool),
      attention_mass_(model->config().num_layers, storage->spec().num_kv_heads) {
  KV_CHECK(model_ != nullptr && storage_ != nullptr);
  if (grammar_vocabulary != nullptr) {
    structured_ = std::make_unique<StructuredDecoder>(std::move(grammar_vocabulary));
  }
}

StatusOr<ModelOutput> ModelRunner::execute(const SchedulerOutput& out, const Scheduler& scheduler,
                                           const KvCacheManager& kv) {
  for (SeqId id : out.finished_ids) {
    samplers_.erase(id);
    attention_mass_.erase(id);
    if (structured_ != nullptr) structured_->Erase(id);
  }
  for (SeqId id : out.preempted_ids) attention_mass_.erase(id);  // recomputed from slot 0
  ModelOutput result;
  if (out.seqs.empty()) return result;

  // Logits rows in order: per sequence its prompt-logits rows, then its sampling row.
  struct Rows {
    const ScheduledSeq* seq;
    int64_t first_row = 0;
    int64_t prompt_first_position = 0;
    int64_t num_prompt_rows = 0;
  };
  ForwardBatch batch;
  std::vector<Rows> rows;
  rows.reserve(out.seqs.size());
  mass_requests_.clear();
  int64_t num_rows = 0;
  for (const ScheduledSeq& s : out.seqs) {
    const Request* r = scheduler.request(s.id);
    KV_CHECK(r != nullptr) << "scheduled request " << s.id << " is unknown";
    const std::vector<TokenId>& tokens = r->all_token_ids();
    KV_CHECK(s.num_computed_tokens + s.num_new_tokens <= r->num_tokens());
    // Slots and positions differ once token eviction compacted the sequence.
    batch.AddSequence(tokens.data() + s.num_computed_tokens, s.num_new_tokens,
                      r->num_kv_slots(), kv.block_table(s.id), false, r->position_offset());
    batch.logits_indices.pop_back();  // AddSequence wants the last row; chosen below
    batch.layer_key_begin.back() = r->kv_layer_key_begin();
    if (auto m = attention_mass_.prepare(*r, batch.num_seqs() - 1, s.num_new_tokens)) {
      mass_requests_.push_back(*m);
    }
    const int64_t first_batch_row = batch.num_tokens() - s.num_new_tokens;
    Rows rs{&s, num_rows};
    if (r->input().prompt_logits_start >= 0) {
      // Positions [lo, hi) of this chunk whose rows predict a prompt token.
      const int64_t lo = std::max(s.num_computed_tokens, r->prompt_logits_next());
      const int64_t hi =
          std::min(s.num_computed_tokens + s.num_new_tokens, r->num_prompt_tokens() - 1);
      for (int64_t p = lo; p < hi; ++p) {
        batch.logits_indices.push_back(first_batch_row + (p - s.num_computed_tokens));
      }
      rs.prompt_first_position = lo;
      rs.num_prompt_rows = std::max<int64_t>(0, hi - lo);
    }
    if (s.samples) batch.logits_indices.push_back(batch.num_tokens() - 1);
    num_rows = batch.num_logits();
    if (num_rows > rs.first_row) rows.push_back(rs);
  }

  const int64_t vocab = model_->config().vocab_size;
  // At least one row, so that data() is valid when no sequence wants logits.
  logits_.resize(static_cast<size_t>(std::max<int64_t>(1, batch.num_logits()) * vocab));
  KV_RETURN_IF_ERROR(model_->Forward(batch, storage_, pool_, logits_.data(), mass_requests_));

  for (const Rows& rs : rows) {
    const ScheduledSeq& s = *rs.seq;
    const Request* r = scheduler.request(s.id);
    if (rs.num_prompt_rows > 0) {
      PromptLogits& pl = result.prompt_logits[s.id];
      pl.first_position = rs.prompt_first_position;
      pl.num_rows = rs.num_prompt_rows;
      const float* first = logits_.data() + rs.first_row * vocab;
      pl.rows.assign(first, first + rs.num_prompt_rows * vocab);
    }
    if (!s.samples) continue;
    auto it = samplers_.find(s.id);
    if (it == samplers_.end()) {
      it = samplers_.emplace(s.id, std::make_unique<Sampler>(r->input().sampling)).first;
    }
    float* row = logits_.data() + (rs.first_row + rs.num_prompt_rows) * vocab;
    const int32_t num_logprobs = r->input().logprobs;
    if (num_logprobs >= 0) raw_row_.assign(row, row + vocab);  // Sample() changes the row
    const std::shared_ptr<const grammar::CompiledGrammar>& grammar = r->input().grammar;
    if (grammar != nullptr) {
      KV_CHECK(structured_ != nullptr) << "request " << s.id << " has a grammar; the runner has "
                                       << "no grammar vocabulary";
      if (structured_->Constrain(s.id, grammar, r->output_ids(), row, vocab) == 0) {
        result.grammar_errors[s.id] =
            "structured output: no token of the vocabulary can continue the output under its "
            "grammar";
        continue;
      }
    }
    const TokenId token = it->second->Sample(row, vocab, r->prompt_ids(), r->output_ids());
    if (grammar != nullptr && structured_->Advance(s.id, token)) {
      result.grammar_stopped.insert(s.id);
    }
    result.sampled[s.id] = token;
    if (num_logprobs >= 0) {
      result.logprobs[s.id] = ComputeLogprobs(raw_row_.data(), vocab, token, num_logprobs);
    }
  }
  return result;
}

}  // namespace kvserve

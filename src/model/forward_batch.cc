#include "model/forward_batch.h"

#include <string>

namespace kvserve {

void ForwardBatch::AddSequence(const std::vector<TokenId>& new_tokens, const BlockTable& table,
                               bool all_logits) {
  AddSequence(new_tokens.data(), static_cast<int64_t>(new_tokens.size()), table.num_tokens(),
              table, all_logits);
}

void ForwardBatch::AddSequence(const TokenId* new_tokens, int64_t num_new, int64_t start_pos,
                               const BlockTable& table, bool all_logits,
                               int64_t position_offset) {
  KV_CHECK(num_new > 0 && start_pos >= 0 && position_offset >= 0);
  KV_CHECK(start_pos + num_new <= table.capacity_tokens())
      << "block table holds " << table.capacity_tokens() << " tokens, need "
      << start_pos + num_new;
  if (query_start.empty()) query_start.push_back(0);
  const int64_t first_row = num_tokens();
  for (int64_t i = 0; i < num_new; ++i) {
    token_ids.push_back(new_tokens[i]);
    positions.push_back(start_pos + position_offset + i);
    slot_mapping.push_back(table.slot(start_pos + i));
  }
  query_start.push_back(num_tokens());
  seq_lens.push_back(start_pos + num_new);
  block_tables.push_back(table.block_ids());
  layer_key_begin.resize(static_cast<size_t>(num_seqs()));  // this sequence's entry: empty
  if (all_logits) {
    for (int64_t i = 0; i < num_new; ++i) logits_indices.push_back(first_row + i);
  } else {
    logits_indices.push_back(first_row + num_new - 1);
  }
}

Status ForwardBatch::Validate(int64_t block_size, int64_t num_blocks) const {
  const int64_t n = num_tokens();
  const int64_t s = num_seqs();
  if (n == 0 || s == 0) return InvalidArgumentError("ForwardBatch: no tokens");
  if (static_cast<int64_t>(positions.size()) != n ||
      static_cast<int64_t>(slot_mapping.size()) != n ||
      static_cast<int64_t>(query_start.size()) != s + 1 ||
      static_cast<int64_t>(block_tables.size()) != s) {
    return InvalidArgumentError("ForwardBatch: array sizes disagree");
  }
  if (query_start.front() != 0 || query_start.back() != n) {
    return InvalidArgumentError("ForwardBatch: query_start must span all tokens");
  }
  for (int64_t i = 0; i < s; ++i) {
    const int64_t begin = query_start[i], end = query_start[i + 1];
    const int64_t num_new = end - begin;
    if (num_new <= 0) return InvalidArgumentError("ForwardBatch: a sequence has no new tokens");
    if (seq_lens[i] < num_new) return InvalidArgumentError("ForwardBatch: seq_len < new tokens");
    const auto& table = block_tables[static_cast<size_t>(i)];
    if (static_cast<int64_t>(table.size()) * block_size < seq_lens[i]) {
      return InvalidArgumentError("ForwardBatch: sequence " + std::to_string(i) +
                                  "'s block table is shorter than its length");
    }
    for (BlockId id : table) {
      if (id < 0 || id >= num_blocks) {
        return InvalidArgumentError("ForwardBatch: block id " + std::to_string(id) +
                                    " outside the cache");
      }
    }
    if (positions[begin] < seq_lens[i] - num_new) {
      return InvalidArgumentError("ForwardBatch: sequence " + std::to_string(i) +
                                  "'s first position is before its first slot");
    }
    for (int64_t r = begin; r < end; ++r) {
      const int64_t pos = seq_lens[i] - num_new + (r - begin);  // slot index
      if (positions[r] != positions[begin] + (r - begin)) {
        return InvalidArgumentError("ForwardBatch: positions of sequence " + std::to_string(i) +
                                    " are not consecutive");
      }
      const int64_t want = static_cast<int64_t>(table[static_cast<size_t>(pos / block_size)]) *
                               block_size + pos % block_size;
      if (slot_mapping[r] != want) {
        return InvalidArgumentError("ForwardBatch: slot_mapping disagrees with the block table");
      }
    }
  }
  if (!layer_key_begin.empty()) {
    if (static_cast<int64_t>(layer_key_begin.size()) != s) {
      return InvalidArgumentError("ForwardBatch: layer_key_begin has no entry per sequence");
    }
    for (int64_t i = 0; i < s; ++i) {
      const int64_t first_new = seq_lens[i] - (query_start[i + 1] - query_start[i]);
      for (int64_t b : layer_key_begin[static_cast<size_t>(i)]) {
        if (b < 0 || b > first_new) {
          return InvalidArgumentError("ForwardBatch: sequence " + std::to_string(i) +
                                      "'s layer_key_begin " + std::to_string(b) +
                                      " is outside [0, " + std::to_string(first_new) + "]");
        }
      }
    }
  }
  for (int64_t r : logits_indices) {
    if (r < 0 || r >= n) return InvalidArgumentError("ForwardBatch: bad logits index");
  }
  return OkStatus();
}

}  // namespace kvserve

// ForwardBatch: everything a model's forward pass needs about one step of several sequences,
// as flat arrays (structure of arrays, as vLLM's attention metadata). The only input to the
// model besides the KV storage; models never see requests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "tokenizer/vocab_spec.h"

namespace kvserve {

// Plain value type. Sequence i owns token rows query_start[i] .. query_start[i+1] - 1; those
// are its cache slots seq_lens[i] - num_new .. seq_lens[i] - 1 (chunked prefill: any number of
// new tokens over any number of cached ones; decode: one). A token's RoPE position is its slot
// index plus the sequence's position offset: 0 normally; after token eviction compacted the
// sequence, the number of slots evicted (H2O, SnapKV, PyramidKV keep each token's original
// position) or still 0 (StreamingLLM assigns positions within the cache).
// Invariants (Validate): sizes agree; query_start starts at 0 and increases strictly; each
// sequence's positions are consecutive and the first is at least its first slot index; block
// tables cover seq_lens; slot_mapping[t] is the slot of row t's slot index in its sequence's
// table; logits indices are valid rows; layer_key_begin is empty or has an entry per sequence,
// each empty or of values in [0, first slot of the sequence's new tokens].
struct ForwardBatch {
  std::vector<TokenId> token_ids;       // [num_tokens]
  std::vector<int64_t> positions;       // [num_tokens]
  std::vector<int64_t> slot_mapping;    // [num_tokens] KV slot each token's K/V is written to
  std::vector<int64_t> query_start;     // [num_seqs + 1] row offsets
  std::vector<int64_t> seq_lens;        // [num_seqs] keys per sequence after this step
  std::vector<std::vector<BlockId>> block_tables;  // [num_seqs][>= ceil(seq_len / block_size)]
  std::vector<int64_t> logits_indices;  // rows whose logits are wanted, in output order
  // Per sequence, the first slot each layer attends (PyramidKV's layers that keep fewer tokens
  // than the table holds); an empty entry (or an empty vector): 0 for every layer.
  std::vector<std::vector<int64_t>> layer_key_begin;  // [num_seqs][0 or num_layers]

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int64_t num_seqs() const { return static_cast<int64_t>(seq_lens.size()); }
  int64_t num_logits() const { return static_cast<int64_t>(logits_indices.size()); }

  // Appends one sequence's new tokens (positions table.num_tokens() ... onwards; the table
  // must already have room for them), wanting logits for its last token, or for every new
  // token when all_logits. Call table.set_num_tokens(...) afterwards (the batch does not
  // change the table).
  void AddSequence(const std::vector<TokenId>& new_tokens, const BlockTable& table,
                   bool all_logits = false);
  // Same for tokens [begin, end) of a longer list at slot indices start_pos + (0 .. end-begin),
  // RoPE positions position_offset (>= 0) beyond those.
  void AddSequence(const TokenId* new_tokens, int64_t num_new, int64_t start_pos,
                   const BlockTable& table, bool all_logits = false,
                   int64_t position_offset = 0);

  // Checks the invariants above against a cache of num_slots slots and block_size.
  Status Validate(int64_t block_size, int64_t num_blocks) const;
};

}  // namespace kvserve

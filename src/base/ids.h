// The integer ids every layer shares: tokens, sequences and KV blocks. They live here, at the
// bottom of the dependency order, so that kv/ and sampling/ need nothing above base/ for them.
#pragma once

#include <cstdint>

namespace kvserve {

// A vocabulary entry (0 .. vocab_size - 1).
using TokenId = int32_t;
inline constexpr TokenId kNoToken = -1;

// A sequence in the KV cache manager; the runtime uses the request's numeric id.
using SeqId = int64_t;

// Index of a KV block in KvStorage's pages (0 .. num_blocks - 1).
using BlockId = int32_t;
inline constexpr BlockId kNoBlock = -1;

}  // namespace kvserve

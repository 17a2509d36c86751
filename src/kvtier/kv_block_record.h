// KvBlockRecord: one full KV block as the disk and Redis tiers keep it, self-checking.
//
// Layout (little-endian), one format for every tier:
//   "KVSBLK01"                      8 bytes of magic (the version is its last two digits)
//   u64 fingerprint                 the model fingerprint (KvTierFingerprint)
//   u64 key                         PrefixBlockKey(NamespaceKey(ns), chain) of this block
//   u64 parent_key                  the same of the block before it (0 for a first block)
//   u32 num_tokens, u32 reserved    block_size
//   u64 payload_bytes               KvStorage::block_bytes()
//   i32 tokens[num_tokens]          the block's token ids
//   payload                         KvStorage::CopyBlockOut bytes (stored dtype)
//   u64 checksum                    XXH3-64 of every byte before it
// A reader checks the size, magic, fingerprint, key and checksum, and the caller checks the
// tokens and parent key against the prompt it serves, so a truncated or corrupted file, a
// different model or a hash collision is refused, never used.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/ids.h"
#include "base/status.h"

namespace kvserve {

// A decoded record. `payload` points into the bytes it was decoded from.
struct KvBlockRecord {
  uint64_t fingerprint = 0;
  uint64_t key = 0;
  uint64_t parent_key = 0;
  std::vector<TokenId> tokens;
  std::string_view payload;  // KvStorage::block_bytes() bytes
};

// Bytes of a record of num_tokens tokens and payload_bytes of payload.
size_t KvBlockRecordBytes(size_t num_tokens, size_t payload_bytes);

// Encodes a record into *out (resized to KvBlockRecordBytes; its capacity is reused), the
// payload written in place by fill_payload(first payload byte), so a block goes from the KV
// pages to the record in one copy.
void EncodeKvBlockRecordInto(uint64_t fingerprint, uint64_t key, uint64_t parent_key,
                             std::span<const TokenId> tokens, size_t payload_bytes,
                             const std::function<void(uint8_t* payload)>& fill_payload,
                             std::string* out);
// The same from a payload in memory.
std::string EncodeKvBlockRecord(uint64_t fingerprint, uint64_t key, uint64_t parent_key,
                                std::span<const TokenId> tokens, std::string_view payload);

// DataLoss for anything that is not an intact record of `fingerprint` and `key` with
// `payload_bytes` of payload. The result's payload points into `bytes`.
StatusOr<KvBlockRecord> DecodeKvBlockRecord(std::string_view bytes, uint64_t fingerprint,
                                            uint64_t key, int64_t payload_bytes);

// A 64-bit fingerprint accumulator (XXH3-64 streaming): what a tier's blocks depend on.
class FingerprintBuilder {
 public:
  FingerprintBuilder();
  ~FingerprintBuilder();
  FingerprintBuilder(const FingerprintBuilder&) = delete;
  FingerprintBuilder& operator=(const FingerprintBuilder&) = delete;
  void Add(const void* data, size_t bytes);
  void Add(std::string_view text);  // length-prefixed, so "ab"+"c" != "a"+"bc"
  void Add(int64_t value) { Add(&value, sizeof(value)); }
  uint64_t Digest() const;

 private:
  void* state_;  // XXH3_state_t
};

}  // namespace kvserve

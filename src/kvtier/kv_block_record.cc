#include "kvtier/kv_block_record.h"

#include <xxhash.h>

#include <cstring>

#include "kvtier/kv_block_store.h"

namespace kvserve {

const char* KvTierName(KvTier tier) {
  switch (tier) {
    case KvTier::kMemory: return "memory";
    case KvTier::kDisk: return "disk";
    case KvTier::kRedis: return "redis";
  }
  return "?";
}

namespace {

constexpr char kMagic[8] = {'K', 'V', 'S', 'B', 'L', 'K', '0', '1'};
constexpr size_t kHeaderBytes = 8 + 8 + 8 + 8 + 4 + 4 + 8;

template <typename T>
void Put(std::string* out, size_t* at, T value) {
  std::memcpy(out->data() + *at, &value, sizeof(T));
  *at += sizeof(T);
}

template <typename T>
T Get(std::string_view in, size_t* at) {
  T value;
  std::memcpy(&value, in.data() + *at, sizeof(T));
  *at += sizeof(T);
  return value;
}

}  // namespace

size_t KvBlockRecordBytes(size_t num_tokens, size_t payload_bytes) {
  return kHeaderBytes + num_tokens * sizeof(TokenId) + payload_bytes + 8;
}

void EncodeKvBlockRecordInto(uint64_t fingerprint, uint64_t key, uint64_t parent_key,
                             std::span<const TokenId> tokens, size_t payload_bytes,
                             const std::function<void(uint8_t* payload)>& fill_payload,
                             std::string* out) {
  const size_t token_bytes = tokens.size() * sizeof(TokenId);
  out->resize(KvBlockRecordBytes(tokens.size(), payload_bytes));
  size_t at = 0;
  std::memcpy(out->data(), kMagic, 8);
  at += 8;
  Put<uint64_t>(out, &at, fingerprint);
  Put<uint64_t>(out, &at, key);
  Put<uint64_t>(out, &at, parent_key);
  Put<uint32_t>(out, &at, static_cast<uint32_t>(tokens.size()));
  Put<uint32_t>(out, &at, 0);
  Put<uint64_t>(out, &at, payload_bytes);
  std::memcpy(out->data() + at, tokens.data(), token_bytes);
  at += token_bytes;
  fill_payload(reinterpret_cast<uint8_t*>(out->data() + at));
  at += payload_bytes;
  Put<uint64_t>(out, &at, XXH3_64bits(out->data(), at));
}

std::string EncodeKvBlockRecord(uint64_t fingerprint, uint64_t key, uint64_t parent_key,
                                std::span<const TokenId> tokens, std::string_view payload) {
  std::string out;
  EncodeKvBlockRecordInto(
      fingerprint, key, parent_key, tokens, payload.size(),
      [&](uint8_t* p) { std::memcpy(p, payload.data(), payload.size()); }, &out);
  return out;
}

StatusOr<KvBlockRecord> DecodeKvBlockRecord(std::string_view bytes, uint64_t fingerprint,
                                            uint64_t key, int64_t payload_bytes) {
  if (bytes.size() < kHeaderBytes + 8) {
    return DataLossError("KV block record truncated (" + std::to_string(bytes.size()) +
                         " bytes)");
  }
  if (std::memcmp(bytes.data(), kMagic, 8) != 0) {
    return DataLossError("not a KV block record (bad magic)");
  }
  size_t at = 8;
  KvBlockRecord r;
  r.fingerprint = Get<uint64_t>(bytes, &at);
  r.key = Get<uint64_t>(bytes, &at);
  r.parent_key = Get<uint64_t>(bytes, &at);
  const auto num_tokens = Get<uint32_t>(bytes, &at);
  Get<uint32_t>(bytes, &at);
  const auto stored_payload = Get<uint64_t>(bytes, &at);
  if (r.fingerprint != fingerprint) return DataLossError("KV block record of another model");
  if (r.key != key) return DataLossError("KV block record under the wrong key");
  if (stored_payload != static_cast<uint64_t>(payload_bytes)) {
    return DataLossError("KV block record of " + std::to_string(stored_payload) +
                         " payload bytes, expected " + std::to_string(payload_bytes));
  }
  const size_t want =
      kHeaderBytes + static_cast<size_t>(num_tokens) * sizeof(TokenId) + stored_payload + 8;
  if (bytes.size() != want) {
    return DataLossError("KV block record of " + std::to_string(bytes.size()) +
                         " bytes, expected " + std::to_string(want));
  }
  uint64_t checksum;
  std::memcpy(&checksum, bytes.data() + want - 8, 8);
  if (checksum != XXH3_64bits(bytes.data(), want - 8)) {
    return DataLossError("KV block record checksum mismatch");
  }
  r.tokens.resize(num_tokens);
  std::memcpy(r.tokens.data(), bytes.data() + at, num_tokens * sizeof(TokenId));
  at += num_tokens * sizeof(TokenId);
  r.payload = bytes.substr(at, stored_payload);
  return r;
}

FingerprintBuilder::FingerprintBuilder() : state_(XXH3_createState()) {
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}

FingerprintBuilder::~FingerprintBuilder() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void FingerprintBuilder::Add(const void* data, size_t bytes) {
  if (bytes > 0) XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, bytes);
}

void FingerprintBuilder::Add(std::string_view text) {
  Add(static_cast<int64_t>(text.size()));
  Add(text.data(), text.size());
}

uint64_t FingerprintBuilder::Digest() const {
  return XXH3_64bits_digest(static_cast<XXH3_state_t*>(state_));
}

}  // namespace kvserve

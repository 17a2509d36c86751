#include "kvtier/kv_block_record.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvserve {
namespace {

const std::vector<TokenId> kTokens = {1, 2, 3, 4};

std::string Payload(size_t n) {
  std::string p(n, '\0');
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<char>(i * 7 + 3);
  return p;
}

TEST(KvBlockRecordTest, RoundTrips) {
  const std::string payload = Payload(1000);
  const std::string rec = EncodeKvBlockRecord(11, 22, 33, kTokens, payload);
  auto r = DecodeKvBlockRecord(rec, 11, 22, 1000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->fingerprint, 11u);
  EXPECT_EQ(r->key, 22u);
  EXPECT_EQ(r->parent_key, 33u);
  EXPECT_EQ(r->tokens, kTokens);
  EXPECT_EQ(r->payload, payload);
}

TEST(KvBlockRecordTest, RefusesEveryDamagedOrForeignRecord) {
  const std::string rec = EncodeKvBlockRecord(11, 22, 33, kTokens, Payload(256));
  // Any flipped byte fails (magic, header, tokens, payload or the checksum itself).
  for (size_t i = 0; i < rec.size(); i += 7) {
    std::string bad = rec;
    bad[i] = static_cast<char>(bad[i] ^ 0x40);
    EXPECT_FALSE(DecodeKvBlockRecord(bad, 11, 22, 256).ok()) << "byte " << i;
  }
  // Truncated anywhere, or with bytes appended.
  for (size_t n : {size_t{0}, size_t{7}, size_t{40}, rec.size() - 1}) {
    auto r = DecodeKvBlockRecord(rec.substr(0, n), 11, 22, 256);
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  }
  EXPECT_FALSE(DecodeKvBlockRecord(rec + "x", 11, 22, 256).ok());
  // Another model, another key, another block geometry.
  EXPECT_FALSE(DecodeKvBlockRecord(rec, 12, 22, 256).ok());
  EXPECT_FALSE(DecodeKvBlockRecord(rec, 11, 23, 256).ok());
  EXPECT_FALSE(DecodeKvBlockRecord(rec, 11, 22, 255).ok());
}

TEST(FingerprintBuilderTest, DependsOnEveryInputAndItsBoundaries) {
  auto digest = [](std::initializer_list<std::string_view> parts) {
    FingerprintBuilder f;
    for (std::string_view p : parts) f.Add(p);
    return f.Digest();
  };
  EXPECT_EQ(digest({"ab", "c"}), digest({"ab", "c"}));
  EXPECT_NE(digest({"ab", "c"}), digest({"a", "bc"}));
  EXPECT_NE(digest({"ab", "c"}), digest({"ab", "d"}));
}

}  // namespace
}  // namespace kvserve
